package e2e

// The scale suite (issue 45) in its short form: 20,000 held connections,
// 10 s of churn at the fastest rate this machine makes, a trace of a
// million events read by every reading command, and record -e all in a
// 64 MB memory cgroup. Each checks what the trace holds against what the
// test made, counting what record reports lost, and each command's peak
// RSS (the kernel's maxrss of the child) against a bound. The bounds are
// set from measurements on the 2-CPU CI VM with a margin stated beside
// each; docs/lab.md lists them.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// scaleHelper makes the connections, inside the namespace it runs in:
// "hold N" opens N loopback connections to its own listener, says "held N"
// and keeps them until its standard input closes; "churn SECONDS" connects and closes (an RST,
// so that no TIME_WAIT holds the ports) as fast as one process can and
// says "made N". Its server closes only after the client's reset. (With
// the server closing first, each reset received in FIN_WAIT1 waited 50 ms
// in the readers for an abort on data while they rescanned every event
// behind it: parse took 46 s for 850,000 -e all events, 0.18 s for 508,000
// of this churn; the readers now find the answer by socket.)
const scaleHelper = `
import resource, socket, sys, threading, time

def listener():
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen(4096)
    return ln, ln.getsockname()

def hold(n):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ln, addr = listener()
    accepted = []
    def accept():
        while len(accepted) < n:
            accepted.append(ln.accept()[0])
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    conns = [socket.create_connection(addr) for _ in range(n)]
    t.join()
    print("held", len(conns), flush=True)
    sys.stdin.read()

def churn(secs):
    ln, addr = listener()
    def accept():
        while True:
            c = ln.accept()[0]
            try:
                c.recv(1)  # the client's RST: closing first would put it in FIN_WAIT1
            except OSError:
                pass
            c.close()
    threading.Thread(target=accept, daemon=True).start()
    linger = (1).to_bytes(4, "little") + (0).to_bytes(4, "little")
    made, end = 0, time.monotonic() + secs
    while time.monotonic() < end:
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        c.connect(addr)
        c.close()
        made += 1
    print("made", made, flush=True)

if sys.argv[1] == "hold":
    hold(int(sys.argv[2]))
else:
    churn(float(sys.argv[2]))
`

// scaleNetns creates a namespace with loopback up and room for the
// helper's ports, and writes the helper; it returns the namespace and the
// helper's path.
func scaleNetns(t *testing.T) (string, string) {
	t.Helper()
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, namespaces")
	testenv.Tool(t, "python3")
	ns := fmt.Sprintf("skbtrace-scale-%d-%s", os.Getpid(), strings.TrimPrefix(t.Name(), "TestScale"))
	addNetns(t, ns)
	for _, args := range [][]string{
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		// 20,000 client ports to one listener need more than the default 28,232.
		{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_local_port_range=10000 65000"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	helper := filepath.Join(t.TempDir(), "scale.py")
	if err := os.WriteFile(helper, []byte(scaleHelper), 0o644); err != nil {
		t.Fatal(err)
	}
	return ns, helper
}

// helperCmd is the helper running mode arg inside ns, ended at cleanup.
func helperCmd(t *testing.T, ns, helper, mode, arg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "python3", helper, mode, arg)
	cmd.Stderr = os.Stderr
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// churnAll runs one churn helper per CPU for d, the fastest this machine
// connects, and returns how many connections they made.
func churnAll(t *testing.T, ns, helper string, d time.Duration) int {
	t.Helper()
	outs := make([]chan string, runtime.NumCPU())
	for i := range outs {
		cmd := helperCmd(t, ns, helper, "churn", strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		out := make(chan string, 1)
		outs[i] = out
		go func() {
			b, err := cmd.Output()
			if err != nil {
				out <- fmt.Sprintf("churn helper: %v", err)
				return
			}
			out <- string(b)
		}()
	}
	made, bad := 0, ""
	for _, out := range outs { // all of them, so that none is still running at a failure
		s := <-out
		var n int
		if _, err := fmt.Sscanf(s, "made %d", &n); err != nil {
			bad = s
		}
		made += n
	}
	if bad != "" {
		t.Fatalf("churn helper said %q", bad)
	}
	return made
}

// maxRSS is a finished command's peak resident set in MiB.
func maxRSS(cmd *exec.Cmd) float64 {
	return float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024 // KiB on Linux
}

var recTotalsRe = regexp.MustCompile(`recorded (\d+) events .*; lost (\d+)`)

// recordTotals reads record's last words: the events it kept and lost.
func recordTotals(t *testing.T, stderr string) (events, lost int) {
	t.Helper()
	m := recTotalsRe.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("record printed no totals: %s", stderr)
	}
	events, _ = strconv.Atoi(m[1])
	lost, _ = strconv.Atoi(m[2])
	return events, lost
}

// readCmd runs a reading command of skbtrace, its standard output to out,
// and returns its standard error and peak RSS in MiB; a failure fails t.
func readCmd(t *testing.T, out io.Writer, args ...string) (string, float64) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var errs strings.Builder
	cmd.Stdout, cmd.Stderr = out, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("skbtrace %s: %v: %s", strings.Join(args, " "), err, errs.String())
	}
	return errs.String(), maxRSS(cmd)
}

// statConnections runs stat --json and returns the lives of sockets it
// counts (with listeners) and the loss it reports, with its peak RSS.
func statConnections(t *testing.T, file string) (conns int, lost uint64, rss float64) {
	t.Helper()
	var out bytes.Buffer
	_, rss = readCmd(t, &out, "stat", "--json", "-i", file)
	var v struct {
		Lost        uint64            `json:"lost"`
		Connections []json.RawMessage `json:"connections"`
		StateOnly   int               `json:"state_only_sockets"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("decoding stat --json: %v", err)
	}
	return len(v.Connections) + v.StateOnly, v.Lost, rss
}

// checkLives checks that stat counts a life for both ends of each of made
// connections and each of listeners listeners, give or take what was
// lost: a lost state change can merge or split lives, one each at most.
func checkLives(t *testing.T, lives int, lost uint64, made, listeners int) {
	t.Helper()
	want := 2*made + listeners
	if d := lives - want; d > int(lost) || -d > int(lost) {
		t.Fatalf("stat counts %d connections, %d made (%d ends and %d listeners), %d events lost", lives, made, want, listeners, lost)
	}
}

// holdAll opens held connections from holders helpers (each process's
// open files are limited: this VM's hard limit is 20,000 and without
// CAP_SYS_RESOURCE cannot be raised) and returns when all are open, with a
// function that closes them.
func holdAll(t *testing.T, ns, helper string, held, holders int) (release func()) {
	t.Helper()
	var cmds []*exec.Cmd
	var stdins []io.Closer
	for i := 0; i < holders; i++ {
		cmd := helperCmd(t, ns, helper, "hold", strconv.Itoa(held/holders))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if line != fmt.Sprintf("held %d\n", held/holders) {
			t.Fatalf("hold helper said %q (%v)", line, err)
		}
		cmds, stdins = append(cmds, cmd), append(stdins, stdin)
	}
	return func() {
		for i, cmd := range cmds {
			stdins[i].Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("hold helper: %v", err)
			}
		}
	}
}

func TestScaleHeldConnections(t *testing.T) {
	requireFamilies(t, "tcp_conn", "tcp_stage", "sock_io")
	ns, helper := scaleNetns(t)
	// 4 helpers: 5,000 connections and their 5,000 accepted ends each.
	const held, holders = 20000, 4
	rec := startRecord(t, "-e", "tcp_conn,tcp_stage,sock_io", "--filter-netns", ns)
	start := time.Now()
	release := holdAll(t, ns, helper, held, holders)
	opened := time.Since(start)
	time.Sleep(5*time.Second - opened) // about 5 s recorded, the connections held to its end
	rec.stop(t, syscall.SIGINT)
	release()
	events, lost := recordTotals(t, rec.stderr.String())
	recRSS := maxRSS(rec.cmd)
	lives, statLost, statRSS := statConnections(t, rec.file)
	if statLost != uint64(lost) {
		t.Fatalf("record lost %d, stat reports %d", lost, statLost)
	}
	checkLives(t, lives, statLost, held, holders)
	// Measured: record 50 MiB (the 8 MiB kernel buffer, the families' maps
	// and its write buffers), stat 41 MiB for 40,004 lives. 4x is far from
	// a flip yet catches memory that grows with events rather than with
	// what is tracked.
	if recRSS > 200 || statRSS > 160 {
		t.Fatalf("peak RSS with %d connections: record %.0f MiB (bound 200), stat --json %.0f MiB (bound 160)", held, recRSS, statRSS)
	}
	t.Logf("%d connections opened in %.1fs and held; %d events, %d lost; stat counts %d lives; peak RSS record %.0f MiB, stat --json %.0f MiB",
		held, opened.Seconds(), events, lost, lives, recRSS, statRSS)
}

func TestScaleChurn(t *testing.T) {
	requireFamilies(t, "tcp_conn")
	ns, helper := scaleNetns(t)
	rec := startRecord(t, "-e", "tcp_conn", "--filter-netns", ns)
	const churnFor = 10 * time.Second
	made := churnAll(t, ns, helper, churnFor)
	rec.stop(t, syscall.SIGINT)
	events, lost := recordTotals(t, rec.stderr.String())
	lives, statLost, statRSS := statConnections(t, rec.file)
	if statLost != uint64(lost) {
		t.Fatalf("record lost %d, stat reports %d", lost, statLost)
	}
	checkLives(t, lives, statLost, made, runtime.NumCPU())
	// stat keeps state per life, so the bound grows with them: measured
	// 220-278 MiB for 432,528-476,434 lives (1.3-1.7 M events), 0.6 KiB a
	// life all told; 100 MiB and 1 KiB a life (565 MiB for the larger) is
	// 2x that, on a faster machine's churn too.
	if bound := 100 + float64(lives)/1024; statRSS > bound {
		t.Fatalf("stat --json of %d lives peaked at %.0f MiB (bound %.0f)", lives, statRSS, bound)
	}
	t.Logf("%d connections in %v (%.0f/s); %d events, %d lost; stat counts %d lives; stat --json peak RSS %.0f MiB",
		made, churnFor, float64(made)/churnFor.Seconds(), events, lost, lives, statRSS)
}

// millionTrace records -e all in ns while a bulk stream and churn run, for
// long enough that the trace passes a million events, and returns it with
// what record counted.
func millionTrace(t *testing.T, ns, helper string) (file string, events, lost int) {
	t.Helper()
	srv := exec.Command(binary, "load", "server", "--listen", "127.0.0.1:5301", "--netns", ns)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for try := 0; ; try++ {
		out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Hltn", "sport = :5301").Output()
		if err == nil && len(out) > 0 {
			break
		}
		if try == 100 {
			t.Fatalf("load server does not listen in %s: %v", ns, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Measured: 6 s make 1.4 M events. A slower run is recorded again,
	// longer by what it lacked.
	churnFor := 6 * time.Second
	for try := 0; ; try++ {
		rec := startRecord(t, "-e", "all", "--filter-netns", ns)
		bulk := exec.Command(binary, "load", "client", "127.0.0.1:5301", "--netns", ns, "-d", strconv.FormatFloat(churnFor.Seconds(), 'f', 1, 64))
		if err := bulk.Start(); err != nil {
			t.Fatal(err)
		}
		churnAll(t, ns, helper, churnFor)
		if err := bulk.Wait(); err != nil {
			t.Fatalf("load client: %v", err)
		}
		rec.stop(t, syscall.SIGINT)
		events, lost = recordTotals(t, rec.stderr.String())
		if events >= 1e6 {
			return rec.file, events, lost
		}
		if try == 1 {
			t.Fatalf("recorded %d events in %v of bulk and churn, not a million", events, churnFor)
		}
		churnFor = time.Duration(float64(churnFor) * 1.2e6 / float64(max(events, 1e5)))
	}
}

var parseTotalsRe = regexp.MustCompile(`(\d+) events read.*; lost (\d+)`)

func TestScaleMillionEvents(t *testing.T) {
	requireFamilies(t)
	ns, helper := scaleNetns(t)
	file, events, lost := millionTrace(t, ns, helper)
	dir := t.TempDir()
	millions := float64(events) / 1e6
	// Bounds in MiB, from what each command measured in seven runs of
	// 1.0-1.3 M events with about 2x to 4x margin: parse and the Perfetto export
	// stream (at most 43, 41 and 57 MiB), so theirs are fixed; stat and the
	// Parquet export keep per connection state (at most 272 and 442 MiB a
	// million events), so theirs grow with the trace a faster machine
	// makes. stat --html's is issue 45's, 3x plain stat's: measured 1.6x to
	// 2.25x, the page's 380-630 MiB varying less than stat's 163-346.
	bounds := map[string]float64{
		"parse": 160, "parse --json": 160, "export --perfetto": 200,
		"stat": 100 + 400*millions, "stat --json": 100 + 400*millions,
		"export --parquet": 100 + 800*millions,
	}
	rss := map[string]float64{}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"parse", []string{"parse"}},
		{"parse --json", []string{"parse", "--json"}},
		{"stat", []string{"stat"}},
		{"stat --json", []string{"stat", "--json"}},
		{"stat --html", []string{"stat", "--html", filepath.Join(dir, "run.html")}},
		{"export --parquet", []string{"export", "--parquet", filepath.Join(dir, "parquet")}},
		{"export --perfetto", []string{"export", "--perfetto", filepath.Join(dir, "run.json")}},
	} {
		stderr, peak := readCmd(t, io.Discard, append(c.args, "-i", file)...)
		rss[c.name] = peak
		if c.name == "parse" {
			m := parseTotalsRe.FindStringSubmatch(stderr)
			if m == nil || m[1] != strconv.Itoa(events) || m[2] != strconv.Itoa(lost) {
				t.Fatalf("record kept %d events and lost %d; parse says %q", events, lost, stderr)
			}
		}
	}
	bounds["stat --html"] = 3 * rss["stat"]
	for name, peak := range rss {
		if peak > bounds[name] {
			t.Errorf("%s of %d events peaked at %.0f MiB (bound %.0f)", name, events, peak, bounds[name])
		}
	}
	t.Logf("%d events, %d lost; peak RSS (MiB): %v", events, lost, rss)
}

// memoryCgroupV1 is where this machine's cgroup v1 memory controller is.
const memoryCgroupV1 = "/sys/fs/cgroup/memory"

// newMemoryCgroup creates a memory cgroup limited to limit bytes, removed
// when t ends (after the processes in it, ended by cleanups registered
// later).
func newMemoryCgroup(t *testing.T, limit int) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(memoryCgroupV1, "memory.limit_in_bytes")); err != nil {
		testenv.SkipOrFail(t, "no cgroup v1 memory controller at %s: %v", memoryCgroupV1, err)
	}
	cg := filepath.Join(memoryCgroupV1, fmt.Sprintf("skbtrace-scale-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatalf("creating memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Errorf("removing memory cgroup: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatalf("limiting memory cgroup: %v", err)
	}
	return cg
}

// cgroupValue reads a number from a cgroup file, or the line key's in a
// file of "key value" lines.
func cgroupValue(t *testing.T, cg, file, key string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if key == "" && len(f) == 1 || len(f) == 2 && f[0] == key {
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				t.Fatalf("%s in %s: %v", file, cg, err)
			}
			return n
		}
	}
	t.Fatalf("no %q in %s/%s: %s", key, cg, file, b)
	return 0
}

func TestScaleRecordIn64MCgroup(t *testing.T) {
	requireFamilies(t)
	ns, helper := scaleNetns(t)
	const limit = 64 << 20
	cg := newMemoryCgroup(t, limit)
	file := filepath.Join(t.TempDir(), "run.trace")
	// The shell joins the cgroup before it becomes record, so that all of
	// record's memory, its maps included, is charged there.
	cmd := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		binary, "record", "-e", "all", "-d", "3", "--filter-netns", ns, "-o", file)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	stderr, ready, read := &syncBuffer{}, make(chan struct{}), make(chan struct{})
	go func() { collectLinesSignal(pipe, stderr, "skbtrace: recording", ready); close(read) }()
	<-ready
	made := 0
	if strings.Contains(stderr.String(), "skbtrace: recording") {
		made = churnAll(t, ns, helper, 2*time.Second)
	}
	<-read
	err = cmd.Wait()
	peak := cgroupValue(t, cg, "memory.max_usage_in_bytes", "")
	if err != nil || cgroupValue(t, cg, "memory.oom_control", "oom_kill") > 0 {
		t.Fatalf("record -e all in a 64 MiB cgroup: %v (OOM kills %d, peak %d MiB): %s",
			err, cgroupValue(t, cg, "memory.oom_control", "oom_kill"), peak>>20, stderr)
	}
	events, lost := recordTotals(t, stderr.String())
	_, summary, err := parseJSON(t, file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}
	m := parseTotalsRe.FindStringSubmatch(summary)
	if m == nil || m[1] != strconv.Itoa(events) || m[2] != strconv.Itoa(lost) {
		t.Fatalf("record kept %d events and lost %d; parse says %q", events, lost, summary)
	}
	lives, statLost, _ := statConnections(t, file)
	checkLives(t, lives, statLost, made, runtime.NumCPU())
	t.Logf("record -e all in 64 MiB: %d connections made, %d events, %d lost; cgroup peak %d MiB", made, events, lost, peak>>20)
}
