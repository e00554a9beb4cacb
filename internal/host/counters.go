package host

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Counters are a namespace's protocol counters keyed "Proto.Name"
// ("Tcp.RetransSegs", "TcpExt.TCPTimeouts"), as /proc/net/snmp and
// /proc/net/netstat print them in header/value line pairs.
type Counters map[string]int64

// Sub is the change from an earlier reading; counters absent before count from 0.
func (c Counters) Sub(before Counters) Counters {
	out := Counters{}
	for k, v := range c {
		out[k] = v - before[k]
	}
	return out
}

// ParseCounters parses the header/value line pairs of /proc/net/snmp or
// /proc/net/netstat into c.
func ParseCounters(r io.Reader, c Counters) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var header []string
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasSuffix(f[0], ":") {
			return fmt.Errorf("line %d: no \"Proto:\" prefix", line)
		}
		if header == nil || header[0] != f[0] {
			header = f
			continue
		}
		if len(f) != len(header) {
			return fmt.Errorf("line %d: %d values for %d names", line, len(f)-1, len(header)-1)
		}
		proto := strings.TrimSuffix(f[0], ":")
		for i := 1; i < len(f); i++ {
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return fmt.Errorf("line %d: %s.%s: %w", line, proto, header[i], err)
			}
			c[proto+"."+header[i]] = v
		}
		header = nil
	}
	return sc.Err()
}

// ReadCounters reads the calling thread's namespace's counters; run it in
// Netns.Do for another namespace (thread-self follows the thread's namespace).
func ReadCounters() (Counters, error) {
	c := Counters{}
	for _, name := range []string{"snmp", "netstat"} {
		path := "/proc/thread-self/net/" + name
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading protocol counters: %w", err)
		}
		err = ParseCounters(f, c)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
	}
	return c, nil
}

// Softnet is the per-CPU backlog accounting of /proc/net/softnet_stat.
type Softnet struct {
	Processed   uint64 `json:"processed"`
	Dropped     uint64 `json:"dropped"`
	TimeSqueeze uint64 `json:"time_squeeze"`
}

// UnmarshalJSON reads this version's keys and those of versions that wrote
// the field names (Processed ...).
func (s *Softnet) UnmarshalJSON(b []byte) error {
	type plain Softnet
	return unmarshalSnake(b, (*plain)(s))
}

// ParseSoftnet parses /proc/net/softnet_stat: one line per CPU of hex columns,
// processed, dropped, time_squeeze first.
func ParseSoftnet(r io.Reader) ([]Softnet, error) {
	var out []Softnet
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			return nil, fmt.Errorf("softnet_stat line %d: %d columns, want at least 3", line, len(f))
		}
		var v [3]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i], 16, 32)
			if err != nil {
				return nil, fmt.Errorf("softnet_stat line %d column %d: %w", line, i+1, err)
			}
			v[i] = n
		}
		out = append(out, Softnet{v[0], v[1], v[2]})
	}
	return out, sc.Err()
}

// ReadSoftnet reads /proc/net/softnet_stat.
func ReadSoftnet() ([]Softnet, error) {
	f, err := os.Open("/proc/net/softnet_stat")
	if err != nil {
		return nil, fmt.Errorf("reading softnet statistics: %w", err)
	}
	defer f.Close()
	return ParseSoftnet(f)
}

// NetSysctls are the settings the doctor reads in each namespace.
var NetSysctls = []string{
	"net.ipv4.tcp_wmem", "net.ipv4.tcp_rmem", "net.core.wmem_max", "net.core.rmem_max",
	"net.ipv4.tcp_congestion_control", "net.ipv4.tcp_autocorking", "net.ipv4.tcp_mtu_probing",
	"net.ipv4.tcp_window_scaling", "net.ipv4.tcp_sack", "net.ipv4.tcp_notsent_lowat",
	"net.core.netdev_max_backlog", "net.core.netdev_budget", "net.core.default_qdisc",
}

// ReadSysctls reads the named sysctls as the calling thread's namespace sees
// them; absent ones are left out.
func ReadSysctls(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(n, ".", "/")))
		if err == nil {
			out[n] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	return out
}

// Mitigation is one CPU vulnerability's state as the kernel reports it.
type Mitigation struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// UnmarshalJSON reads this version's keys and those of versions that wrote
// the field names.
func (m *Mitigation) UnmarshalJSON(b []byte) error {
	type plain Mitigation
	return unmarshalSnake(b, (*plain)(m))
}

// ReadMitigations lists the vulnerabilities for which a mitigation is in
// force (/sys/devices/system/cpu/vulnerabilities), in name order.
func ReadMitigations(dir string) ([]Mitigation, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading CPU mitigations: %w", err)
	}
	var out []Mitigation
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if state := strings.TrimSpace(string(b)); strings.HasPrefix(state, "Mitigation") {
			out = append(out, Mitigation{e.Name(), state})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// MitigationsDir is where the kernel reports CPU vulnerabilities.
const MitigationsDir = "/sys/devices/system/cpu/vulnerabilities"
