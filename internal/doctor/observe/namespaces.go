package observe

import (
	"github.com/skbtrace/skbtrace/internal/host"
)

// openNamespaces opens the namespaces an observation watches (watchedNames):
// one asked for by name must open; of the defaults, one that cannot becomes
// a note.
func openNamespaces(names []string, notes *[]string) ([]*watched, error) {
	var spaces []*watched
	for _, n := range watchedNames(names) {
		w, err := openWatched(n)
		if err != nil && len(names) > 0 {
			for _, w := range spaces {
				if w.ns != nil {
					w.ns.Close()
				}
			}
			return nil, err
		}
		if err != nil {
			*notes = append(*notes, err.Error())
			continue
		}
		spaces = appendWatched(spaces, w)
	}
	return spaces, nil
}

// appendWatched adds a namespace unless one of the same inode is watched
// already: run under ip netns exec, this process's own namespace is also a
// named one, and watching both reported each socket twice (the second time
// as "host", without its commands' ip netns exec). The name wins over
// "host".
func appendWatched(spaces []*watched, w *watched) []*watched {
	for i, have := range spaces {
		if w.inode == 0 || have.inode != w.inode {
			continue
		}
		if have.name == host.SelfNetnsName {
			spaces[i] = w
			return spaces
		}
		if w.ns != nil {
			w.ns.Close()
		}
		return spaces
	}
	return append(spaces, w)
}

// watchedNames are the namespaces asked for, or by default this process's
// own and every named one.
func watchedNames(asked []string) []string {
	if len(asked) > 0 {
		return asked
	}
	return append([]string{host.SelfNetnsName}, host.NamedNetns()...)
}

// openWatched opens a namespace by name for reading; this process's own
// needs no handle.
func openWatched(name string) (*watched, error) {
	if name == host.SelfNetnsName {
		w := &watched{name: name}
		w.inode, _ = host.LookupNetns(name)
		return w, nil
	}
	ns, err := host.OpenNetns(name)
	if err != nil {
		return nil, err
	}
	w := &watched{name: name, ns: ns}
	w.inode, _ = ns.Inode()
	return w, nil
}
