package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

var (
	clientStates = []string{"SYN_SENT", "ESTABLISHED", "FIN_WAIT1", "FIN_WAIT2", "CLOSE"}
	serverStates = []string{"SYN_RECV", "ESTABLISHED", "CLOSE_WAIT", "LAST_ACK", "CLOSE"}
)

// sockStates lists the states of the socket that reached ESTABLISHED with
// these addresses; following the socket address picks up SYN_SENT, whose
// local port is not assigned yet when the state is set.
func sockStates(events []map[string]any, local, peer string) []string {
	var sock any
	for _, ev := range events {
		if ev["action"] == "tcp_conn" && ev["state"] == "ESTABLISHED" && ev["local"] == local && ev["peer"] == peer {
			sock = ev["sock"]
		}
	}
	var states []string
	for _, ev := range events {
		if ev["action"] == "tcp_conn" && ev["sock"] == sock {
			states = append(states, ev["state"].(string))
		}
	}
	return states
}

// connectAndClose opens a connection, sends a little, and closes from the client first.
func connectAndClose(t *testing.T, ln net.Listener, dial func() (net.Conn, error)) (local, peer string) {
	t.Helper()
	done := serve(t, ln, drain)
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	local, peer = c.LocalAddr().String(), c.RemoteAddr().String()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	<-done
	time.Sleep(200 * time.Millisecond)
	return local, peer
}

func checkStates(t *testing.T, events []map[string]any, local, peer string) {
	t.Helper()
	if got := sockStates(events, local, peer); !slices.Equal(got, clientStates) {
		t.Errorf("client %s: states %v, want %v", local, got, clientStates)
	}
	if got := sockStates(events, peer, local); !slices.Equal(got, serverStates) {
		t.Errorf("server %s: states %v, want %v", peer, got, serverStates)
	}
}

func TestConnStatesLoopback(t *testing.T) {
	requireFamilies(t, "tcp_conn")
	port := freePort(t)
	rec := startRecord(t, "-e", "tcp_conn", "--filter-port", strconv.Itoa(port))
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	local, peer := connectAndClose(t, ln, func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) })
	ln.Close()
	rec.stop(t, syscall.SIGINT)
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}
	checkStates(t, events, local, peer)
	// The listener's own life, set by this process. By socket: before 5.19 or
	// so a new connection's socket enters SYN_RECV before its peer is set.
	var listener any
	var listen []string
	for _, ev := range events {
		if ev["state"] == "LISTEN" && ev["local"] == ln.Addr().String() {
			listener = ev["sock"]
			if ev["ctx"] != "task" {
				t.Errorf("listen() happened in process context, event says %v", ev["ctx"])
			}
		}
		if listener != nil && ev["sock"] == listener {
			listen = append(listen, ev["state"].(string))
		}
	}
	if !slices.Equal(listen, []string{"LISTEN", "CLOSE"}) {
		t.Errorf("listener states %v, want [LISTEN CLOSE]", listen)
	}
}

func TestConnStatesVethBetweenNamespaces(t *testing.T) {
	requireFamilies(t, "tcp_conn")
	pair := newPair(t)
	rec := startRecord(t, "-e", "tcp_conn", "--filter-port", "5201")
	ln := listenIn(t, pair.Receiver, "tcp", lab.ReceiverAddr.Addr().String()+":5201")
	defer ln.Close()
	local, peer := connectAndClose(t, ln, func() (net.Conn, error) {
		return dialFrom(t, pair.Sender, &net.Dialer{}, "tcp", ln.Addr().String()), nil
	})
	rec.stop(t, syscall.SIGINT)
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}
	if !strings.HasPrefix(local, lab.SenderAddr.Addr().String()+":") {
		t.Fatalf("client address %s is not the sender's", local)
	}
	checkStates(t, events, local, peer)
	for _, ev := range events {
		want := pair.Receiver.Name
		if strings.HasPrefix(ev["local"].(string), lab.SenderAddr.Addr().String()+":") {
			want = pair.Sender.Name
		}
		if ev["netns_name"] != want {
			t.Errorf("event %v: netns_name %v, want %s", ev["seq"], ev["netns_name"], want)
		}
	}
	// The namespace filter at parse time keeps only the sender's side.
	sender, summary, err := parseJSON(t, rec.file, "--filter-netns", pair.Sender.Name)
	if err != nil {
		t.Fatalf("parse --filter-netns: %v: %s", err, summary)
	}
	if len(sender) == 0 || len(sender) >= len(events) {
		t.Errorf("--filter-netns %s kept %d of %d events", pair.Sender.Name, len(sender), len(events))
	}
}

// skbtracePrograms lists loaded BPF programs that carry skbtrace's program names.
func skbtracePrograms(t *testing.T) map[ebpf.ProgramID]string {
	t.Helper()
	ours := map[string]bool{}
	for _, name := range []string{"tcp_conn", "tcp_probe", "tcp_sendlim_close", "sendlim_open_runs", "dev_xmit", "softirq_enter", "qdisc_enqueue", "skb_drop", "sock_send"} {
		ours[name[:min(len(name), 15)]] = true
	}
	found := map[ebpf.ProgramID]string{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return found
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		p.Close()
		if err == nil && ours[info.Name] {
			found[id] = info.Name
		}
	}
}

func TestNoProgramStaysLoaded(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	before := skbtracePrograms(t) // another skbtrace on the host may be running
	cases := map[string]func(t *testing.T){
		"duration": func(t *testing.T) {
			rec := startRecord(t, "-d", "1")
			if err := rec.wait(); err != nil {
				t.Fatalf("record: %v: %s", err, rec.stderr)
			}
		},
		"sigint":  func(t *testing.T) { startRecord(t).stop(t, syscall.SIGINT) },
		"sigterm": func(t *testing.T) { startRecord(t).stop(t, syscall.SIGTERM) },
		"sigkill": func(t *testing.T) { startRecord(t).stop(t, syscall.SIGKILL) },
		"command": func(t *testing.T) {
			rec := startRecord(t, "--", "sleep", "0.5")
			if err := rec.wait(); err != nil {
				t.Fatalf("record: %v: %s", err, rec.stderr)
			}
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			run(t)
			waitProgramsGone(t, before)
		})
	}
}

func TestKilledRecordingLeavesParseableTrace(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	port := freePort(t)
	rec := startRecord(t, "--filter-port", strconv.Itoa(port))
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := serve(t, ln, drain)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// The stream runs beside the kill; bulk reports with t.Errorf, which a
	// goroutine may call, and stop, which may end the test, runs here.
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		bulk(t, c, 2500*time.Millisecond)
	}()
	time.Sleep(1500 * time.Millisecond)
	rec.stop(t, syscall.SIGKILL)
	<-streamed
	<-done
	events, summary, err := parseJSON(t, rec.file)
	if len(events) == 0 {
		t.Fatalf("no events survived SIGKILL: %v: %s", err, summary)
	}
	if err != nil && !strings.Contains(summary, "truncated") {
		t.Fatalf("parse failed for another reason than a torn tail: %v: %s", err, summary)
	}
	if !strings.Contains(summary, "did not end normally") {
		t.Errorf("summary does not say the recording was cut short: %s", summary)
	}
	established := false
	for _, ev := range events {
		established = established || ev["state"] == "ESTABLISHED"
	}
	if !established {
		t.Errorf("the connection's ESTABLISHED event, written a second before the kill, is missing")
	}
}

// waitProgramsGone fails unless every skbtrace program loaded since before is
// unloaded within 5 seconds: the kernel frees them asynchronously.
func waitProgramsGone(t *testing.T, before map[ebpf.ProgramID]string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for id, name := range skbtracePrograms(t) {
			if _, ok := before[id]; !ok {
				left = append(left, fmt.Sprintf("%s (id %d)", name, id))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after skbtrace exited, still loaded: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shortName is a program's name as every kernel keeps it: 15 characters
// (some kernels' BTF gives the whole name back).
func shortName(name string) string { return name[:min(len(name), 15)] }

// What `events` says a kernel runs is what record attaches: the same
// families, the same reasons for those skipped, the programs of the hooks chosen.
func TestEventsMatchesWhatRecordAttaches(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	fams := eventsOnThisKernel(t)
	before := programIDs()
	rec := startRecord(t, "-d", "30")
	loaded := map[string]bool{}
	for id := range programIDs() {
		if before[id] {
			continue
		}
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			if info, err := p.Info(); err == nil {
				loaded[shortName(info.Name)] = true
			}
			p.Close()
		}
	}
	rec.stop(t, syscall.SIGINT)

	want := map[string]bool{}
	running := map[string]bool{}
	for name, fs := range fams {
		if !fs.Verified {
			t.Fatalf("events did not decide by loading as root: %+v", fs)
		}
		if !fs.Runs {
			line := fmt.Sprintf("skbtrace: skipping %s: %s", name, fs.Reason)
			if !strings.Contains(rec.stderr.String(), line) {
				t.Errorf("events says %q; record did not:\n%s", line, rec.stderr)
			}
			continue
		}
		running[name] = true
		// Iterators too: they are loaded with their family and run when reading what is open.
		for _, prog := range fs.Programs {
			want[shortName(prog)] = true
		}
	}
	delete(loaded, "seq_reserve") // the sequence counter's, on kernels that have one
	for name := range want {
		if !loaded[name] {
			t.Errorf("events lists program %s; record did not load it (loaded: %v)", name, loaded)
		}
	}
	for name := range loaded {
		if !want[name] {
			t.Errorf("record loaded program %s, which events does not list", name)
		}
	}
	var recorded []string
	for _, line := range strings.Split(rec.stderr.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "skbtrace: recording "); ok {
			recorded = strings.Split(strings.TrimSuffix(rest, "; stop with Ctrl-C"), ", ")
		}
	}
	if len(recorded) != len(running) {
		t.Errorf("record ran %v; events says %d families run", recorded, len(running))
	}
	for _, name := range recorded {
		if !running[name] {
			t.Errorf("record ran %s, which events says is skipped", name)
		}
	}
}

// Rotation at a high event rate: every family exactly, aggregated every
// 10 ms, over a veth stream beside connections opened and closed in a loop;
// files of 1 MiB, the newest four kept: the older files are gone, those left
// are within the size and each parses alone, and together, in order, as
// one recording that ended.
func TestRotationKeepsTheNewestFilesEachParseable(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	pair := newPair(t)
	rec := startRecord(t, "-e", "all", "--sample", "1", "--interval", "10ms", "--max-size", "1M", "--max-files", "4")
	ln := listenIn(t, pair.Receiver, "tcp", lab.ReceiverAddr.Addr().String()+":5301")
	defer ln.Close()
	serve(t, ln, drain)
	stop := make(chan struct{})
	churned := churnFrom(pair.Sender, ln.Addr().String(), 1024, stop)
	vethStream(t, pair, 15*time.Second, 0)
	close(stop)
	t.Logf("%d connections opened and closed beside the stream", <-churned)
	rec.stop(t, syscall.SIGINT)
	files, _ := filepath.Glob(rec.file + ".*")
	if len(files) != 4 || !strings.Contains(rec.stderr.String(), "older ones removed") {
		t.Fatalf("%d files %v; want the newest 4 and the older removed: %s", len(files), files, rec.stderr)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s holds %d bytes, over 1 MiB", f, st.Size())
		}
		events, summary, err := parseJSON(t, f)
		if err != nil || len(events) == 0 || strings.Contains(summary, "did not end") {
			t.Errorf("%s alone: %d events, %v: %s", f, len(events), err, summary)
		}
	}
	events, summary, err := parseJSON(t, rec.file+".*")
	if err != nil || !strings.Contains(summary, "in 4 files") || strings.Contains(summary, "did not end") {
		t.Fatalf("the four files in order: %d events, %v: %s", len(events), err, summary)
	}
	t.Logf("%d events in the newest 4 files: %s", len(events), strings.TrimSpace(summary))
}
