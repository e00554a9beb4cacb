package cli

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
)

// filterFlags are the socket filters shared by record, parse and live.
type filterFlags struct {
	port  portValue
	addr  string
	netns string
}

func (f *filterFlags) bind(fs *pflag.FlagSet) {
	fs.Var(&f.port, "filter-port", "only sockets with this local or peer `PORT`")
	fs.StringVar(&f.addr, "filter-addr", "", "only sockets with this local or peer `IP`")
	fs.StringVar(&f.netns, "filter-netns", "", "only sockets in this network namespace (`NAME|INODE`; \"host\" is skbtrace's own)")
}

// portValue is a TCP or UDP port, 1-65535 (0, unset, filters nothing).
type portValue uint16

func (p *portValue) String() string {
	if *p == 0 {
		return ""
	}
	return strconv.Itoa(int(*p))
}

func (p *portValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || n > 65535 {
		return fmt.Errorf("%q is not a port (1-65535)", s)
	}
	*p = portValue(n)
	return nil
}

func (p *portValue) Type() string { return "PORT" }

func (f *filterFlags) parseAddr() (netip.Addr, error) {
	if f.addr == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(f.addr)
	if err != nil {
		return netip.Addr{}, usagef("--filter-addr: %q is not an IP address", f.addr)
	}
	return a.Unmap(), nil
}

// probeFilter resolves the filters for the kernel, which needs a namespace inode.
func (f *filterFlags) probeFilter() (probe.Filter, error) {
	a, err := f.parseAddr()
	if err != nil {
		return probe.Filter{}, err
	}
	pf := probe.Filter{Port: uint16(f.port), Addr: a}
	if f.netns != "" {
		ino, err := host.LookupNetns(f.netns)
		if err != nil {
			return probe.Filter{}, usagef("--filter-netns: %v", err)
		}
		pf.NetnsInode = ino
		// Best effort: without them, events of unknown namespace are left out.
		pf.NetnsAddrs, _ = host.NetnsAddrs(f.netns)
	}
	return pf, nil
}

// eventFilter is the filter applied when reading a trace, where a namespace
// name is matched against the names recorded in the trace.
func (f *filterFlags) eventFilter() (event.Filter, error) {
	a, err := f.parseAddr()
	if err != nil {
		return event.Filter{}, err
	}
	ef := event.Filter{Port: uint16(f.port), Addr: a}
	if f.netns != "" {
		if n, err := strconv.ParseUint(f.netns, 10, 32); err == nil {
			ef.Netns, ef.HasNetns = uint32(n), true
		} else {
			ef.NetnsName = f.netns
		}
	}
	return ef, nil
}

// parseDuration accepts Go durations ("5s", "2m") and bare numbers of seconds ("5", "0.5").
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs < 0 {
			return 0, usagef("duration %q is negative", s)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, usagef("duration %q is not a number of seconds or a duration like 5s or 2m", s)
	}
	return d, nil
}

func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// traceFiles are the files of one recording, in order.
type traceFiles struct {
	names []string
	ins   []io.Reader
	close func()
}

// traceInputs opens the files of one recording in the order given (a
// rotation's files; a pattern that names no file as it is, such as
// 'run.trace.*', stands for the files it matches, in name order) and
// resolves the read-side filters. A file that is not a trace, and files of
// different recordings, are refused by name. The caller calls close.
func traceInputs(paths []string, stdin io.Reader, filters *filterFlags) (*traceFiles, event.Filter, error) {
	filter, err := filters.eventFilter()
	if err != nil {
		return nil, filter, err
	}
	var names []string
	for _, p := range paths {
		if _, err := os.Stat(p); p == "-" || err == nil || !strings.ContainsAny(p, "*?[") {
			names = append(names, p)
			continue
		}
		m, err := filepath.Glob(p)
		if err != nil || len(m) == 0 {
			return nil, filter, fmt.Errorf("opening the trace: no file matches %s", p)
		}
		names = append(names, m...)
	}
	if len(names) > 1 && slices.Contains(names, "-") {
		return nil, filter, usagef("standard input (-) is read alone, not among other files")
	}
	tf := &traceFiles{names: names, close: func() {}}
	var closers []func()
	tf.close = func() {
		for _, c := range closers {
			c()
		}
	}
	for _, name := range names {
		in, c, err := openInput("trace", name, stdin)
		if err != nil {
			tf.close()
			return nil, filter, err
		}
		closers = append(closers, c)
		if in, err = sniffInput(name, in); err != nil {
			tf.close()
			return nil, filter, err
		}
		tf.ins = append(tf.ins, in)
	}
	if len(names) > 1 {
		if err := oneRecording(names); err != nil {
			tf.close()
			return nil, filter, err
		}
	}
	return tf, filter, nil
}

// openInput opens what a command reads, named what in its errors ("trace",
// "capture", "run"): the file at path, or standard input for "-". A
// directory is refused by name, not read as a damaged file.
func openInput(what, path string, stdin io.Reader) (io.Reader, func(), error) {
	if path == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the %s: %w", what, err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("opening the %s %s: is a directory", what, path)
	}
	return f, func() { f.Close() }, nil
}

// inputArgs takes a command's inputs as arguments or with -i, both
// spellings alike; -i's default (skbtrace.trace) stands when neither is given.
func inputArgs(c *cobra.Command, args, flagged []string) ([]string, error) {
	if len(args) == 0 {
		return flagged, nil
	}
	if c.Flags().Changed("input") {
		return nil, usagef("give the input as arguments or with -i, not both (got %q and -i %q)", args, flagged)
	}
	return args, nil
}

// parseSize reads a size in bytes: a number with an optional unit K, M or G
// (KiB, MiB, GiB; KB, MB, GB are read as the same binary multiples).
func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"GB", 30}, {"MB", 20}, {"KB", 10}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, shift = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.shift
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 63)
	if err != nil || n == 0 || n > math.MaxInt>>shift {
		return 0, fmt.Errorf("%q is not a size (a positive number of bytes, or with K, M or G: 64M, 1GiB)", s)
	}
	return int(n << shift), nil
}

// addrValue is a listening address, HOST:PORT (HOST may be empty: every
// address), refused at the flag when it is not one.
type addrValue string

func (a *addrValue) String() string { return string(*a) }

func (a *addrValue) Set(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not 0-65535", s, port)
	}
	*a = addrValue(s)
	return nil
}

func (a *addrValue) Type() string { return "ADDR" }

// readToken reads a bearer token from its file: surrounding white space
// (a trailing newline) is not part of it.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("the token file %s is empty", path)
	}
	return token, checkToken(token, "the token file "+path)
}

// checkToken refuses what an Authorization header cannot carry, which
// would otherwise fail only at the first request.
func checkToken(token, from string) error {
	for _, c := range []byte(token) {
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("%s holds a byte a bearer token cannot carry (0x%02x; visible ASCII only)", from, c)
		}
	}
	return nil
}
