package event

import "net/netip"

// Filter selects events by socket; the zero value matches everything.
type Filter struct {
	Port      uint16
	Addr      netip.Addr
	Netns     uint32 // by inode, when HasNetns
	HasNetns  bool
	NetnsName string // by the name the recording gave the namespace
}

// Match reports whether ev passes; netnsName resolves inodes for NetnsName.
// Events without a socket pass only when no filter is set.
func (f *Filter) Match(ev *Event, netnsName func(uint32) string) bool {
	if f.Port == 0 && !f.Addr.IsValid() && !f.HasNetns && f.NetnsName == "" {
		return true
	}
	s := ev.Sock()
	if s == nil {
		return false
	}
	if f.HasNetns && s.Netns != f.Netns {
		return false
	}
	if f.NetnsName != "" && netnsName(s.Netns) != f.NetnsName {
		return false
	}
	if f.Port != 0 && s.Local.Port() != f.Port && s.Peer.Port() != f.Port {
		return false
	}
	if f.Addr.IsValid() {
		a := f.Addr.Unmap()
		if s.Local.Addr().Unmap() != a && s.Peer.Addr().Unmap() != a {
			return false
		}
	}
	return true
}
