package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/collect"
	"github.com/skbtrace/skbtrace/internal/collect/pktfilter"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/record"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/units"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// recordFlags are shared by record and live.
type recordFlags struct {
	duration    string
	families    []string
	ringSize    string
	interval    time.Duration
	rttInterval time.Duration
	filters     filterFlags
	dev         string
	pid         uint32
	sample      float64
	triggers    []string
	pre, post   time.Duration
	ring        string
	windowRate  int
	packets     string
	cpus        string
	contexts    []string
}

func (r *recordFlags) bind(fs *pflag.FlagSet) {
	fs.StringVarP(&r.duration, "duration", "d", "", "stop after this long (`DURATION`: 5, 5s, 2m; bare numbers are seconds; 0, as without -d: until Ctrl-C, SIGTERM or the command's end)")
	fs.StringSliceVarP(&r.families, "events", "e", nil, "event `FAMILY`s to record, comma-separated, or all (default: all that can run)")
	fs.StringVar(&r.ringSize, "kernel-buffer", "8M", "the kernel's ring buffer, where events wait to be read (`SIZE`, a power of two: 4K to 1G); raise it when events are lost")
	fs.DurationVar(&r.interval, "interval", time.Second, "aggregation `DURATION` of the per-device, per-CPU and per-process families (at least 10ms)")
	fs.DurationVar(&r.rttInterval, "rtt-interval", 10*time.Millisecond, "least `DURATION` between two tcp_rtt samples of a socket")
	r.filters.bind(fs)
	fs.StringVar(&r.dev, "filter-dev", "", "only this network device (`NAME`), for device-level families")
	fs.Uint32Var(&r.pid, "filter-pid", 0, "only this process (`PID`), for sock_io")
	fs.StringArrayVar(&r.triggers, "trigger", nil, "flight recorder: keep the recent past in memory and write only the windows around events matching `EXPR` (repeat for several): "+record.TriggerHelp)
	fs.DurationVar(&r.pre, "pre", 10*time.Second, "with --trigger, how much before a firing its window holds (`DURATION`)")
	fs.DurationVar(&r.post, "post", 5*time.Second, "with --trigger, how much after the last firing its window holds (`DURATION`)")
	fs.StringVar(&r.ring, "flight-memory", "64M", "with --trigger, the memory (`SIZE`) that holds the recent past, from which each window's --pre is taken")
	// The names before, which were easy to mix up, for scripts: hidden from
	// --help, and job warns of them on stderr (pflag's MarkDeprecated
	// would write its notice to standard output, into record -o -'s trace).
	fs.StringVar(&r.ringSize, "ring-size", "8M", "deprecated name of --kernel-buffer (`SIZE`)")
	fs.StringVar(&r.ring, "ring", "64M", "deprecated name of --flight-memory (`SIZE`)")
	for old := range renamedFlags {
		fs.Lookup(old).Hidden = true
	}
	fs.IntVar(&r.windowRate, "trigger-limit", 6, "with --trigger, at most `N` new windows a minute; firings beyond are counted, not written")
	fs.StringVarP(&r.packets, "packet-filter", "F", "", "count in the per-packet families (dev_xmit, dev_recv, qdisc, skb_drop) only the packets this pcap-filter `EXPR` matches, "+
		"as tcpdump would (from the IP header: no link-layer tests), run in the kernel")
	fs.StringVar(&r.cpus, "cpu", "", "only events on these CPUs (`LIST`: 0,2-3)")
	fs.StringSliceVar(&r.contexts, "context", nil, "only events written in these contexts (`CTX`: syscall, softirq, hardirq; comma-separated)")
	fs.Float64Var(&r.sample, "sample", 0, "attach the per-packet families (dev_xmit, dev_recv, napi_poll, softirq, sock_io; tcp_stage starts bytes in it and follows them to their end) only this `SHARE` of each interval, "+
		"0 < SHARE <= 1 (default: 0.05 for the families recorded without -e or with -e all, 1 for families named with -e)")
}

// renamedFlags maps the old names of record's and live's flags to the new.
var renamedFlags = map[string]string{"ring-size": "kernel-buffer", "ring": "flight-memory"}

// given is how the user spelled a renamed flag: its old name when given so.
func given(fs *pflag.FlagSet, name string) string {
	for old, renamed := range renamedFlags {
		if renamed == name && fs.Changed(old) {
			return "--" + old
		}
	}
	return "--" + name
}

// recordJob is a validated record or live invocation.
type recordJob struct {
	opts     collect.Options
	duration time.Duration
	command  []string
	flight   *record.FlightOptions
	// dest names where the trace goes, for the totals; "" when something
	// else says so (rotation's files, live's printing).
	dest string
}

func (r *recordFlags) job(c *cobra.Command, args []string, stderr io.Writer) (*recordJob, error) {
	dash := c.ArgsLenAtDash()
	if dash != 0 && len(args) > 0 {
		return nil, usagef("unexpected argument %q (put the command to run after --)", args[0])
	}
	// Before attaching or creating the trace: a command that cannot run
	// would otherwise leave a recording of nothing over an earlier one.
	if len(args) > 0 {
		if _, err := exec.LookPath(args[0]); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the name is said once
			} else if errors.Is(err, exec.ErrNotFound) {
				err = errors.New("not found in $PATH")
			}
			return nil, fmt.Errorf("cannot run %s: %w", args[0], err)
		}
	}
	d, err := parseDuration(r.duration)
	if err != nil {
		return nil, err
	}
	ring, err := parseSize(r.ringSize)
	if err != nil {
		return nil, usagef("%s: %v", given(c.Flags(), "kernel-buffer"), err)
	}
	if ring < 4096 || ring > 1<<30 || ring&(ring-1) != 0 {
		return nil, usagef("%s %s is not a power of two from 4K to 1G", given(c.Flags(), "kernel-buffer"), r.ringSize)
	}
	if r.interval < 10*time.Millisecond {
		return nil, usagef("--interval %v is shorter than 10ms", r.interval)
	}
	if r.sample < 0 || r.sample > 1 {
		return nil, usagef("--sample %v is not a share between 0 and 1", r.sample)
	}
	// The default set is sampled; families named with -e are exact unless
	// --sample says otherwise.
	if r.sample == 0 {
		r.sample = 1
		if fams := splitList(r.families); len(fams) == 0 || len(fams) == 1 && fams[0] == "all" {
			r.sample = collect.DefaultSample
		}
	}
	if r.rttInterval <= 0 {
		return nil, usagef("--rtt-interval %v is not positive", r.rttInterval)
	}
	if len(r.dev) > 15 {
		return nil, usagef("--filter-dev %q is longer than a device name can be (15)", r.dev)
	}
	flight, err := r.flightOptions(c.Flags())
	if err != nil {
		return nil, err
	}
	pf, err := r.filters.probeFilter()
	if err != nil {
		return nil, err
	}
	pf.Dev, pf.Pid = r.dev, r.pid
	if err := r.kernelFilters(&pf); err != nil {
		return nil, err
	}
	if r.dev != "" && !host.DeviceExists(r.dev) {
		fmt.Fprintf(stderr, "skbtrace: warning: no device named %s in this or any named network namespace yet: device-level events will be empty unless it appears\n", r.dev)
	}
	fams, required, err := collect.Select(splitList(r.families))
	if err != nil {
		return nil, usageError{err}
	}
	if err := host.CheckTracingCaps(); err != nil {
		return nil, err
	}
	for old, name := range renamedFlags {
		if c.Flags().Changed(old) {
			fmt.Fprintf(stderr, "skbtrace: warning: --%s is deprecated: use --%s\n", old, name)
		}
	}
	j := &recordJob{
		opts: collect.Options{Families: fams, Required: required, Filter: pf, RingBytes: uint32(ring),
			Interval: r.interval, RTTInterval: r.rttInterval, Sample: r.sample},
		duration: d,
		command:  args,
		flight:   flight,
	}
	if err := j.fitMemory(stderr); err != nil {
		return nil, err
	}
	return j, nil
}

// kernelFilters reads -F, --cpu and --context into pf.
func (r *recordFlags) kernelFilters(pf *probe.Filter) error {
	if r.packets != "" {
		prog, err := pktfilter.Compile(r.packets)
		if err != nil {
			return usagef("-F: %v", err)
		}
		pf.Packets = prog
	}
	if r.cpus != "" {
		cpus, err := parseCPUList(r.cpus)
		if err != nil {
			return usagef("--cpu: %v", err)
		}
		online, err := host.OnlineCPUs()
		if err != nil {
			return err
		}
		if err := onlineCPUs(cpus, online); err != nil {
			return usagef("--cpu %s: %v", r.cpus, err)
		}
		pf.CPUs = cpus
	}
	for _, c := range splitList(r.contexts) {
		bit, ok := contextNames[c]
		if !ok {
			return usagef("--context: %q is not a context (syscall, softirq, hardirq)", c)
		}
		pf.Contexts |= bit
	}
	return nil
}

var contextNames = map[string]wire.ContextFilter{
	"syscall": wire.ContextFilterCONTEXT_FILTER_TASK,
	"softirq": wire.ContextFilterCONTEXT_FILTER_SOFTIRQ,
	"hardirq": wire.ContextFilterCONTEXT_FILTER_HARDIRQ,
}

// maxCPUs is how many CPUs --cpu can name (the kernel side's mask).
const maxCPUs = 1024

// parseCPUList reads a CPU list as the kernel writes them (0,2-3,8).
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.ParseUint(lo, 10, 16)
		last := first
		if err == nil && isRange {
			last, err = strconv.ParseUint(hi, 10, 16)
		}
		if err != nil || last < first {
			return nil, fmt.Errorf("%q is not a CPU list like 0,2-3", s)
		}
		if last >= maxCPUs {
			return nil, fmt.Errorf("CPU %d is beyond the %d the kernel filter holds", last, maxCPUs)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, int(c))
		}
	}
	return cpus, nil
}

// onlineCPUs refuses CPUs that are not online: their events never come,
// and a recording of none would look like an idle host.
func onlineCPUs(cpus, online []int) error {
	var missing []int
	for _, c := range cpus {
		if !slices.Contains(online, c) {
			missing = append(missing, c)
		}
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	switch {
	case len(missing) == 1:
		return fmt.Errorf("CPU %d is not online (online: %s)", missing[0], cpuRanges(online))
	case len(missing) > 1:
		return fmt.Errorf("CPUs %s are not online (online: %s)", cpuRanges(missing), cpuRanges(online))
	}
	return nil
}

// cpuRanges writes a sorted CPU list as the kernel does (0-3,6).
func cpuRanges(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// flightOptions reads --trigger and its companions (nil without triggers).
func (r *recordFlags) flightOptions(fs *pflag.FlagSet) (*record.FlightOptions, error) {
	if len(r.triggers) == 0 {
		for _, name := range []string{"pre", "post", "flight-memory", "ring", "trigger-limit"} {
			if fs.Changed(name) {
				return nil, usagef("--%s goes with --trigger", name)
			}
		}
		return nil, nil
	}
	o := &record.FlightOptions{Pre: r.pre, Post: r.post, MaxWindowsPerMinute: r.windowRate}
	for _, expr := range r.triggers {
		t, err := record.ParseTrigger(expr)
		if err != nil {
			return nil, usagef("--trigger: %v", err)
		}
		o.Triggers = append(o.Triggers, t)
	}
	if r.pre < 0 || r.post < 0 {
		return nil, usagef("--pre and --post must not be negative")
	}
	if r.windowRate < 1 {
		return nil, usagef("--trigger-limit %d: at least one window a minute", r.windowRate)
	}
	ring, err := parseSize(r.ring)
	if err != nil {
		return nil, usagef("%s: %v", given(fs, "flight-memory"), err)
	}
	if ring < record.MinFileSize {
		return nil, usagef("%s %s is below 1M", given(fs, "flight-memory"), r.ring)
	}
	o.RingBytes = ring
	return o, nil
}

func recordCmd(e *env) *cobra.Command {
	var flags recordFlags
	var output, maxSize string
	var maxFiles int
	c := &cobra.Command{
		Use:   "record [flags] [-- COMMAND ARGS...]",
		Short: "record network-stack events into a binary trace",
		Long: `record attaches eBPF programs to kernel tracepoints and writes what they
report to a binary trace, until the duration ends, the command exits, or
SIGINT/SIGTERM. Everything is detached on exit. A command still running
then is ended (SIGTERM, SIGKILL 2 s later), and one whose skbtrace is
killed dies with it. Read the trace with parse.`,
		Example: `  skbtrace record -d 10 -o run.trace
  skbtrace record -e tcp_sendlim --filter-port 5201 -o - -- iperf3 -c 127.0.0.1 | skbtrace parse -i -
  skbtrace record --max-size 100M --max-files 10 -o /var/tmp/run.trace`,
		RunE: func(c *cobra.Command, args []string) error {
			size := 0
			if maxFiles != 0 && maxSize == "" {
				return usagef("--max-files needs --max-size")
			}
			if maxSize != "" {
				var err error
				if size, err = parseSize(maxSize); err != nil {
					return usagef("--max-size: %v", err)
				}
				if size < record.MinFileSize {
					return usagef("--max-size %s is below 1M: a file holds the name tables and whole blocks", maxSize)
				}
				if output == "-" {
					return usagef("--max-size writes files: give -o BASE, not -")
				}
				if maxFiles < 0 {
					return usagef("--max-files %d is negative", maxFiles)
				}
			}
			job, err := flags.job(c, args, e.stderr)
			if err != nil {
				return err
			}
			if size > 0 {
				rot, err := record.NewRotator(output, int64(size), maxFiles)
				if err != nil {
					return err
				}
				if isTerminal(e.stderr) {
					job.opts.Status = e.stderr
				}
				err = job.run(rot, e.stderr)
				if cerr := rot.Close(); cerr != nil && err == nil {
					err = fmt.Errorf("closing the last trace file: %w", cerr)
				}
				if len(rot.Files) > 0 {
					fmt.Fprintf(e.stderr, "skbtrace: wrote %d files, %s to %s", len(rot.Files), rot.Files[0], rot.Files[len(rot.Files)-1])
					if rot.Removed > 0 {
						fmt.Fprintf(e.stderr, " (%d older ones removed, --max-files %d)", rot.Removed, maxFiles)
					}
					fmt.Fprintf(e.stderr, "; read them with skbtrace parse -i '%s.*'\n", output)
				}
				return err
			}
			var out io.Writer = e.stdout
			if output != "-" {
				f := &createOnWrite{path: output}
				if err := f.check(); err != nil {
					return err
				}
				defer f.Close()
				out = f
				job.dest = output
			} else if isTerminal(e.stdout) {
				return usagef("refusing to write a binary trace to a terminal (use -o FILE, or pipe into skbtrace parse -i -)")
			} else {
				job.dest = "standard output"
			}
			if isTerminal(e.stderr) {
				job.opts.Status = e.stderr
			}
			return job.run(out, e.stderr)
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "skbtrace.trace", "trace `FILE`, or - for standard output; with --max-size the files' base name")
	c.Flags().StringVar(&maxSize, "max-size", "", "rotate: write BASE.000, BASE.001, ... of at most `SIZE` each (at least 1M), each readable alone")
	c.Flags().IntVar(&maxFiles, "max-files", 0, "with --max-size, keep only the newest `N` files (0: all)")
	flags.bind(c.Flags())
	c.Flags().SetInterspersed(false)
	return c
}

// run records into out until the duration, the command or a signal ends it,
// and prints the totals on stderr.
func (j *recordJob) run(out io.Writer, stderr io.Writer) error {
	// Before attaching: a signal from then on must stop the recording cleanly.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// What failed to reach the trace's file is told apart from other
	// failures: the message then names the file.
	sink := &sinkWriter{w: out}
	out = sink
	var flight *record.Flight
	if j.flight != nil {
		f, err := record.NewFlight(out, *j.flight)
		if err != nil {
			return err
		}
		flight, out = f, f
	}
	rec, err := collect.Start(j.opts)
	if err != nil {
		return err
	}
	defer rec.Close()
	w, err := trace.NewWriter(out, collect.Header(strings.Join(os.Args, " ")))
	if err != nil {
		return sink.explain(err, j.dest)
	}
	for _, s := range rec.Skipped {
		fmt.Fprintf(stderr, "skbtrace: skipping %s: %v\n", s.Family.Name, s.Reason)
	}
	var names []string
	for _, r := range rec.Running {
		names = append(names, r.Family.Name)
		for _, w := range r.Without {
			fmt.Fprintf(stderr, "skbtrace: %s runs with %s\n", r.Family.Name, w)
		}
	}
	fmt.Fprintf(stderr, "skbtrace: recording %s; stop with Ctrl-C\n", strings.Join(names, ", "))

	stop := make(chan struct{})
	var once sync.Once
	stopNow := func() { once.Do(func() { close(stop) }) }
	var timeout <-chan time.Time
	if j.duration > 0 {
		t := time.NewTimer(j.duration)
		defer t.Stop()
		timeout = t.C
	}
	var wrapped *wrappedCmd
	var cmdDone <-chan struct{}
	if len(j.command) > 0 {
		if wrapped, err = startWrapped(j.command, os.Stdin, stderr); err != nil {
			return err
		}
		// Whatever way the recording fails, the command does not outlive it.
		defer wrapped.end(endGrace, stderr)
		cmdDone = wrapped.Done()
	}
	exited := make(chan bool, 1) // whether the command's exit ended the recording
	go func() {
		select {
		case <-sigs:
		case <-timeout:
		case <-stop:
		case <-cmdDone:
			exited <- true
			stopNow()
			return
		}
		exited <- false
		stopNow()
	}()

	tot, err := rec.Run(w, stop)
	stopNow()
	if !<-exited && wrapped != nil {
		// Before the totals: the command's last output comes first.
		wrapped.end(endGrace, stderr)
	}
	printTotals(stderr, tot, j.dest)
	if err != nil {
		return sink.explain(err, j.dest)
	}
	if flight != nil {
		if err := flight.Close(); err != nil {
			return sink.explain(fmt.Errorf("ending the flight recorder's trace: %w", err), j.dest)
		}
		printFlight(stderr, flight.Stats(), j.flight)
	}
	if wrapped != nil {
		return wrapped.status()
	}
	return nil
}

// sinkWriter keeps the first error of the trace's destination: the disk
// filled, the reader of the pipe went away.
type sinkWriter struct {
	w   io.Writer
	err error
}

func (s *sinkWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}

// explain turns err into what a user needs when the destination failed:
// which file, why, and what the trace still holds. Other errors stay.
func (s *sinkWriter) explain(err error, dest string) error {
	if s.err == nil || dest == "" {
		return err
	}
	cause := s.err
	var pe *fs.PathError
	if errors.As(cause, &pe) {
		cause = pe.Err // dest names the file
	}
	if _, file := s.w.(*createOnWrite); !file {
		return fmt.Errorf("writing the trace to %s: %w", dest, cause)
	}
	return fmt.Errorf("writing the trace to %s: %w (it holds what was written before, its last block possibly torn: read it with skbtrace parse --partial)", dest, cause)
}

// printTotals says what a recording wrote, and to dest when given.
func printTotals(w io.Writer, t collect.Totals, dest string) {
	var names []string
	var total uint64
	for n, c := range t.Events {
		names = append(names, n)
		total += c
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, t.Events[n]))
	}
	fmt.Fprintf(w, "skbtrace: recorded %s in %.1f s, %s", units.Count(total, "event", "events"), t.Duration.Seconds(), units.SignedBytes(t.Bytes))
	if dest != "" {
		fmt.Fprintf(w, " to %s", dest)
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	ring, ringParts := lostSum(t.Lost)
	full, fullParts := lostSum(t.Full)
	fmt.Fprintf(w, "; lost %d", ring+full)
	var causes []string
	if ring > 0 {
		causes = append(causes, fmt.Sprintf("%s: the kernel's ring buffer was full; raise --kernel-buffer or narrow the filters", ringParts))
	}
	if full > 0 {
		causes = append(causes, fmt.Sprintf("%s: a kernel map was full (more sockets or processes at once than it holds, docs/events.md lists the sizes); narrow the filters", fullParts))
	}
	if len(causes) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(causes, "; "))
	}
	fmt.Fprintln(w)
}

// lostSum is the total of per-family counts, and them as "family n, ...".
func lostSum(byFamily map[string]uint64) (uint64, string) {
	var total uint64
	var parts []string
	for n, c := range byFamily {
		total += c
		parts = append(parts, fmt.Sprintf("%s %d", n, c))
	}
	sort.Strings(parts)
	return total, strings.Join(parts, ", ")
}

func printFlight(w io.Writer, st record.FlightStats, o *record.FlightOptions) {
	fmt.Fprintf(w, "skbtrace: flight recorder: %s, %s written (%s of events, %d of %d blocks)",
		units.Count(st.Firings, "firing", "firings"), units.Count(st.Windows, "window", "windows"), units.Duration(st.Written), st.Blocks, st.Seen)
	if st.Suppressed > 0 {
		fmt.Fprintf(w, "; %s no window, over --trigger-limit %d a minute", units.Count(st.Suppressed, "firing opened", "firings opened"), o.MaxWindowsPerMinute)
	}
	if st.ShortPre > 0 {
		fmt.Fprintf(w, "; %s part of their --pre %s: the flight recorder's memory was full (raise --flight-memory)", units.Count(st.ShortPre, "window lacks", "windows lack"), units.Duration(o.Pre))
	}
	fmt.Fprintln(w)
}

// createOnWrite creates its file at the first write: the trace's header,
// written once the programs are attached. A run that cannot attach leaves
// an earlier trace of that name as it was; one that attached writes in
// place, so that a crash leaves what was recorded readable.
type createOnWrite struct {
	path string
	f    *os.File
}

// check refuses at once a path that cannot be created: its directory
// missing or not writable, or a directory in its place.
func (c *createOnWrite) check() error {
	if st, err := os.Stat(c.path); err == nil && st.IsDir() {
		return fmt.Errorf("creating trace file: %s is a directory", c.path)
	}
	if err := unix.Access(filepath.Dir(c.path), unix.W_OK); err != nil {
		return fmt.Errorf("creating trace file %s: %w", c.path, err)
	}
	return nil
}

func (c *createOnWrite) Write(p []byte) (int, error) {
	if c.f == nil {
		f, err := os.Create(c.path)
		if err != nil {
			return 0, fmt.Errorf("creating trace file: %w", err)
		}
		c.f = f
	}
	return c.f.Write(p)
}

func (c *createOnWrite) Close() error {
	if c.f == nil {
		return nil
	}
	return c.f.Close()
}
