package e2e

// NIC wire tests: two emulated NICs of one model, cabled to each other by
// the kernel matrix's NIC guests (make nics, scripts/kernels/nics.sh), each
// moved into a namespace of its own. They check what the device families
// record on a real driver (interrupts, NAPI, the driver's own qdisc and
// offloads) against the driver's own counters. SKBTRACE_NIC_WIRE names the
// two NICs, sender first; without it they skip, under CI too: only those
// guests have a wire to give them.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

const nicWireEnv = "SKBTRACE_NIC_WIRE"

// nicWire is the two NICs, each up with its lab address in a namespace of
// its own.
type nicWire struct {
	Sender, Receiver       *host.Netns
	SenderDev, ReceiverDev string
	// Driver is ethtool -i's name for the NICs' driver (both are one model).
	Driver string
}

var nicWires int

// newNICWire moves the NICs SKBTRACE_NIC_WIRE names into two fresh
// namespaces, addresses them and waits until the sender reaches the
// receiver. When the test ends, whatever way, the offloads it changed are
// restored and the namespaces deleted, which hands the NICs back to the
// initial namespace; the test fails unless both are back.
func newNICWire(t *testing.T) *nicWire {
	t.Helper()
	names := os.Getenv(nicWireEnv)
	if names == "" {
		t.Skipf("%s names no NICs: these tests run in the NIC guests of make nics", nicWireEnv)
	}
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	devs := strings.Split(names, ",")
	if len(devs) != 2 || devs[0] == "" || devs[1] == "" || devs[0] == devs[1] {
		t.Fatalf("%s=%q: want two NICs, SENDER,RECEIVER", nicWireEnv, names)
	}
	w := &nicWire{SenderDev: devs[0], ReceiverDev: devs[1]}
	out, err := exec.Command("ethtool", "-i", w.SenderDev).Output()
	if err != nil {
		t.Fatalf("reading the driver of %s: %v", w.SenderDev, err)
	}
	if m := regexp.MustCompile(`(?m)^driver: (\S+)`).FindSubmatch(out); m != nil {
		w.Driver = string(m[1])
	}
	nicWires++
	id := fmt.Sprintf("%d-nic%d", os.Getpid(), nicWires)
	// Registered first so that it runs last, after the cleanups of what
	// ran inside the namespaces (servers, offload changes).
	var made []*host.Netns
	t.Cleanup(func() {
		for _, ns := range made {
			if err := ns.Delete(); err != nil {
				t.Errorf("deleting namespace %s: %v", ns.Name, err)
			}
		}
		waitNICsHome(t, w.SenderDev, w.ReceiverDev)
	})
	for _, side := range []struct {
		ns   **host.Netns
		role string
		dev  string
		addr string
	}{{&w.Sender, "snd", w.SenderDev, lab.SenderAddr.String()}, {&w.Receiver, "rcv", w.ReceiverDev, lab.ReceiverAddr.String()}} {
		ns, err := host.NewNetns("skbtrace-" + id + "-" + side.role)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, ns)
		*side.ns = ns
		if err := nicInto(ns, side.dev, side.addr); err != nil {
			t.Fatal(err)
		}
		keepFeatures(t, ns, side.dev)
	}
	// The emulated PHYs take a few seconds to report a link.
	var ping error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		if _, ping = w.Sender.Run("ping", "-c", "1", "-W", "1", lab.ReceiverAddr.Addr().String()); ping == nil {
			break
		}
	}
	if ping != nil {
		t.Fatalf("the sender never reached the receiver over %s-%s: %v", w.SenderDev, w.ReceiverDev, ping)
	}
	t.Logf("wire %s (netns %s) -> %s (netns %s), driver %s", w.SenderDev, w.Sender.Name, w.ReceiverDev, w.Receiver.Name, w.Driver)
	return w
}

// nicInto moves dev into ns, gives it addr and brings it up, IPv6 off so
// that no neighbour discovery or router solicitation adds to its counters.
func nicInto(ns *host.Netns, dev, addr string) error {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("finding NIC %s: %w", dev, err)
	}
	if err := netlink.LinkSetNsFd(l, int(ns.Handle())); err != nil {
		return fmt.Errorf("moving %s into namespace %s: %w", dev, ns.Name, err)
	}
	if _, err := ns.Run("sysctl", "-qw", "net.ipv6.conf."+dev+".disable_ipv6=1"); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns.Handle())
	if err != nil {
		return fmt.Errorf("opening netlink in %s: %w", ns.Name, err)
	}
	defer h.Close()
	for _, name := range []string{"lo", dev} {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("finding %s in %s: %w", name, ns.Name, err)
		}
		if name == dev {
			a, err := netlink.ParseAddr(addr)
			if err != nil {
				return fmt.Errorf("parsing %s: %w", addr, err)
			}
			if err := h.AddrAdd(l, a); err != nil {
				return fmt.Errorf("adding %s to %s in %s: %w", addr, dev, ns.Name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("bringing up %s in %s: %w", name, ns.Name, err)
		}
	}
	return nil
}

// waitNICsHome fails unless every device is back in the initial namespace
// within 30 s: a deleted namespace hands its physical devices back from a
// workqueue, once nothing holds it any more.
func waitNICsHome(t *testing.T, devs ...string) {
	t.Helper()
	var missing []string
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		missing = missing[:0]
		for _, d := range devs {
			if _, err := netlink.LinkByName(d); err != nil {
				missing = append(missing, d)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Errorf("NICs %v are not back in the initial namespace 30 s after their namespaces were deleted", missing)
			return
		}
	}
}

// ethtoolFeature is one line of ethtool -k.
type ethtoolFeature struct {
	on, fixed bool
	// parent: other features are listed under it; setting it sets them.
	parent bool
}

func ethtoolFeatures(t *testing.T, ns *host.Netns, dev string) map[string]ethtoolFeature {
	t.Helper()
	out, err := ns.Run("ethtool", "-k", dev)
	if err != nil {
		t.Fatalf("reading the offloads of %s: %v", dev, err)
	}
	feats := map[string]ethtoolFeature{}
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || strings.HasSuffix(line, ":") {
			continue
		}
		feats[name] = ethtoolFeature{on: strings.HasPrefix(val, "on"), fixed: strings.Contains(val, "[fixed]"),
			parent: !strings.HasPrefix(line, "\t") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\t")}
	}
	return feats
}

// keepFeatures restores, when the test ends, every offload of dev that
// differs from now: ethtool settings stay with a NIC from namespace to
// namespace, and the next test must find the driver's defaults. Features
// listed under another are set one by one, not through their parent, which
// would set them all alike.
func keepFeatures(t *testing.T, ns *host.Netns, dev string) {
	t.Helper()
	before := ethtoolFeatures(t, ns, dev)
	t.Cleanup(func() {
		now := ethtoolFeatures(t, ns, dev)
		var args []string
		for name, f := range before {
			if !f.fixed && !f.parent && now[name].on != f.on {
				args = append(args, name, map[bool]string{true: "on", false: "off"}[f.on])
			}
		}
		if len(args) == 0 {
			return
		}
		if _, err := ns.Run("ethtool", append([]string{"-K", dev}, args...)...); err != nil {
			t.Errorf("restoring the offloads of %s: %v", dev, err)
		}
	})
}

// setFeatures switches offloads of dev (ethtool -K names), those ethtool -k
// lists as not fixed; it returns the ones it could not switch.
func setFeatures(t *testing.T, ns *host.Netns, dev string, value string, names ...string) (fixed []string) {
	t.Helper()
	long := map[string]string{"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
		"gro": "generic-receive-offload", "lro": "large-receive-offload", "rx-gro-hw": "rx-gro-hw"}
	feats := ethtoolFeatures(t, ns, dev)
	args := []string{"-K", dev}
	for _, n := range names {
		f, ok := feats[long[n]]
		if !ok || f.fixed {
			fixed = append(fixed, n)
			continue
		}
		args = append(args, n, value)
	}
	if len(args) > 2 {
		if _, err := ns.Run("ethtool", args...); err != nil {
			t.Fatalf("switching offloads of %s: %v", dev, err)
		}
	}
	return fixed
}

// iperf3 runs streams iperf3 streams (CUBIC) of secs seconds at once from
// the sender's namespace, each to a server of its own in the receiver's,
// the client of stream i pinned to CPU i, and returns the bits per second
// the senders report.
func (w *nicWire) iperf3(t *testing.T, secs, streams int) float64 {
	t.Helper()
	iperf3 := testenv.Tool(t, "iperf3")
	addr := lab.ReceiverAddr.Addr().String()
	type result struct {
		bps float64
		err error
	}
	results := make(chan result, streams)
	for i := 0; i < streams; i++ {
		port := strconv.Itoa(5201 + i)
		srv := exec.Command("ip", "netns", "exec", w.Receiver.Name, iperf3, "-s", "-1", "-B", addr, "-p", port)
		if err := srv.Start(); err != nil {
			t.Fatalf("starting the iperf3 server on port %s: %v", port, err)
		}
		// A server still running would hold the namespace, and the NIC in it.
		defer func() {
			srv.Process.Kill()
			srv.Wait()
		}()
		waitListeningIn(t, w.Receiver, addr+":"+port)
		go func(cpu int) {
			out, err := exec.Command("taskset", "-c", strconv.Itoa(cpu), "ip", "netns", "exec", w.Sender.Name, iperf3,
				"-c", addr, "-p", port, "-t", strconv.Itoa(secs), "-C", "cubic", "-J").Output()
			if err != nil {
				results <- result{err: fmt.Errorf("iperf3 to port %s from %s: %w: %s", port, w.Sender.Name, err, out)}
				return
			}
			var res struct {
				End struct {
					SumSent struct {
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_sent"`
				} `json:"end"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				results <- result{err: fmt.Errorf("reading iperf3 -J: %w", err)}
				return
			}
			results <- result{bps: res.End.SumSent.BitsPerSecond}
		}(i)
	}
	var bps float64
	for i := 0; i < streams; i++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		bps += r.bps
	}
	return bps
}

// Every family that a TCP stream over the wire exercises records it, and
// the device families agree within 5 % with what the driver and the kernel
// count over the same stream.
func TestNICWireFamiliesAgreeWithTheDriver(t *testing.T) {
	w := newNICWire(t)
	wire := []string{"dev_xmit", "dev_recv", "napi_poll", "softirq", "qdisc"}
	tcp := []string{"tcp_conn", "tcp_sendlim", "tcp_rtt", "tcp_rcvbuf", "sock_io"}
	requireFamilies(t, append(wire, tcp...)...)
	counter, known := txCounters[w.Driver]
	if !known {
		t.Fatalf("no rule for what driver %s's tx packet counter counts: add it to txCounters", w.Driver)
	}
	tc, err := w.Sender.Run("tc", "qdisc", "show", "dev", w.SenderDev)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(tc), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			kinds = append(kinds, f[1])
		}
	}
	t.Logf("qdiscs of %s: %s", w.SenderDev, strings.ReplaceAll(strings.TrimSpace(tc), "\n", "; "))

	oneTxQueue(t, w.Sender, w.SenderDev)

	defer enableBPFStats(t)()
	loaded := programIDs()
	rec := startRecord(t, "-e", "all", "--sample", "1")
	// The counters are read with the wire quiet for 3 s: drivers that count
	// at completion (e1000, virtio_net) count a packet an interrupt after
	// sending it, and e1000 reads the rest of its statistics from the NIC
	// every 2 s (its watchdog).
	time.Sleep(3 * time.Second)
	before, useBefore := w.counters(t), programUseByName(loaded)
	// Two streams, from both CPUs into one transmit queue: packets queue
	// in the qdisc only when the driver is busy or another CPU is
	// transmitting; an idle work-conserving qdisc (fq_codel, pfifo_fast)
	// hands a packet straight to the driver without enqueueing it, and no
	// qdisc tracepoint fires.
	bps := w.iperf3(t, 4, 2)
	time.Sleep(3 * time.Second)
	after, useAfter := w.counters(t), programUseByName(loaded)
	rec.stop(t, syscall.SIGINT)
	t.Logf("iperf3: %.0f Mbit/s", bps/1e6)
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}

	perFamily := map[string]int{}
	for _, ev := range events {
		perFamily[ev["action"].(string)]++
	}
	fams := eventsOnThisKernel(t)
	var all []string
	for name := range fams {
		all = append(all, name)
	}
	sort.Strings(all)
	for _, name := range all {
		t.Logf("family %s: %d events", name, perFamily[name])
		nicReport(t, "families.tsv", fmt.Sprintf("%s\t%d", name, perFamily[name]))
	}
	for _, name := range append(wire, tcp...) {
		if perFamily[name] == 0 {
			t.Errorf("family %s recorded nothing of a TCP stream over %s", name, w.Driver)
		}
	}
	// The device families, on the wire's own devices.
	for _, c := range []struct{ family, dev string }{
		{"dev_xmit", w.SenderDev}, {"dev_recv", w.ReceiverDev}, {"napi_poll", w.ReceiverDev}, {"qdisc", w.SenderDev},
	} {
		if countOn(events, c.family, c.dev) == 0 {
			t.Errorf("family %s recorded nothing on %s", c.family, c.dev)
		}
	}
	st := nicStatOf(t, rec.file)
	var seen []string
	for _, q := range st.Qdiscs {
		if q.Dev == w.SenderDev {
			seen = append(seen, q.Kind)
		}
	}
	t.Logf("stat's qdiscs on %s: %v; tc's: %v", w.SenderDev, seen, kinds)
	for _, k := range seen {
		if !slices.Contains(kinds, k) {
			t.Errorf("stat shows a %s qdisc on %s, which tc does not list (%v)", k, w.SenderDev, kinds)
		}
	}
	// mq only holds a qdisc per transmit queue: packets are enqueued there.
	for _, k := range kinds {
		if k != "mq" && !slices.Contains(seen, k) {
			t.Errorf("tc lists a %s qdisc on %s, which stat does not show (%v)", k, w.SenderDev, seen)
		}
	}

	for _, ev := range events {
		if ev["action"] == "skb_drop" {
			t.Logf("skb_drop [%v] at %v on %q: %v", ev["reason"], ev["location"], ev["dev"], ev["cnt"])
		}
	}
	logStatsDelta(t, w.SenderDev, before.sndS, after.sndS)
	logStatsDelta(t, w.ReceiverDev, before.rcvS, after.rcvS)

	snd, rcv := onDev(w.SenderDev), onDev(w.ReceiverDev)
	// Data: sender to receiver.
	txUnit, txTraced := "segments", total(events, "dev_xmit", "segs", snd)
	if counter.skbs {
		txUnit, txTraced = "skbs", total(events, "dev_xmit", "skbs", snd)
	}
	xmitSkbs, xmitSegs := total(events, "dev_xmit", "skbs", snd), total(events, "dev_xmit", "segs", snd)
	t.Logf("dev_xmit on %s: %.0f skbs, %.0f segments (%.2f per skb), %.0f bytes", w.SenderDev, xmitSkbs, xmitSegs,
		xmitSegs/math.Max(xmitSkbs, 1), total(events, "dev_xmit", "bytes", snd))
	txPackets := float64(after.snd.TxPackets - before.snd.TxPackets)
	agree(t, fmt.Sprintf("sender %s: dev_xmit %s vs tx_packets (netlink)", w.SenderDev, txUnit), txTraced, txPackets)
	if counter.skbs && xmitSegs != xmitSkbs {
		observe(t, fmt.Sprintf("sender %s: dev_xmit segments vs tx_packets (netlink)", w.SenderDev), xmitSegs, txPackets,
			w.Driver+"'s counter counts a TSO skb once")
	}
	if b, ok := ethtoolPackets(before.sndS, "tx"); ok {
		a, _ := ethtoolPackets(after.sndS, "tx")
		what := fmt.Sprintf("sender %s: dev_xmit %s vs ethtool -S tx packets", w.SenderDev, txUnit)
		if counter.ethtoolFrames != "" {
			observe(t, what, txTraced, a-b, counter.ethtoolFrames)
		} else {
			agree(t, what, txTraced, a-b)
		}
	}
	recvSkbs, recvSegs := total(events, "dev_recv", "skbs", rcv), total(events, "dev_recv", "segs", rcv)
	t.Logf("dev_recv on %s: %.0f skbs, %.0f segments (%.2f per skb), %.0f GRO in, %.0f bytes", w.ReceiverDev, recvSkbs, recvSegs,
		recvSegs/math.Max(recvSkbs, 1), total(events, "dev_recv", "gro_in", rcv), total(events, "dev_recv", "bytes", rcv))
	reasm := after.reasm - before.reasm
	t.Logf("receiver IpReasmReqds +%.0f (IP fragments that arrived)", reasm)
	// What arrives is what the NIC counted: segments GRO merged count
	// each (gso_segs), IP fragments each arrive as an skb of their own.
	rxPackets := float64(after.rcv.RxPackets - before.rcv.RxPackets)
	agree(t, fmt.Sprintf("receiver %s: dev_recv segments vs rx_packets (netlink)", w.ReceiverDev), recvSegs, rxPackets)
	if b, ok := ethtoolPackets(before.rcvS, "rx"); ok {
		a, _ := ethtoolPackets(after.rcvS, "rx")
		agree(t, fmt.Sprintf("receiver %s: dev_recv segments vs ethtool -S rx packets", w.ReceiverDev), recvSegs, a-b)
	}
	// A driver's poll returns the frames it took off its receive ring,
	// before GRO.
	polls, work := total(events, "napi_poll", "polls", rcv), total(events, "napi_poll", "work", rcv)
	t.Logf("napi_poll on %s: %.0f polls, %.0f packets, %.1f per poll", w.ReceiverDev, polls, work, work/math.Max(polls, 1))
	agree(t, fmt.Sprintf("receiver %s: napi_poll packets vs rx_packets (netlink)", w.ReceiverDev), work, rxPackets)

	// ACKs: receiver to sender, never offloaded.
	what := fmt.Sprintf("receiver %s: dev_xmit segments (ACKs) vs tx_packets (netlink)", w.ReceiverDev)
	acks, rcvTx := total(events, "dev_xmit", "segs", rcv), float64(after.rcv.TxPackets-before.rcv.TxPackets)
	if counter.acksUnsent != "" {
		observe(t, what, acks, rcvTx, counter.acksUnsent)
	} else {
		agree(t, what, acks, rcvTx)
	}
	sndRx := float64(after.snd.RxPackets - before.snd.RxPackets)
	agree(t, fmt.Sprintf("sender %s: dev_recv segments (ACKs) vs rx_packets (netlink)", w.SenderDev),
		total(events, "dev_recv", "segs", snd), sndRx)
	agree(t, fmt.Sprintf("sender %s: napi_poll packets vs rx_packets (netlink)", w.SenderDev),
		total(events, "napi_poll", "work", snd), sndRx)

	runsPerPacket(t, w, useBefore, useAfter, rxPackets+sndRx)

	// The kernel counts each skb it receives, on any device, in the CPU's
	// processed column, after GRO: dev_recv's skbs on every device.
	var processed float64
	var perCPU []string
	for i := range after.processed {
		d := after.processed[i] - before.processed[i]
		processed += d
		perCPU = append(perCPU, fmt.Sprintf("cpu%d +%.0f", i, d))
	}
	t.Logf("softnet_stat processed: %s", strings.Join(perCPU, ", "))
	for _, cpu := range st.CPUs {
		t.Logf("cpu %d: %d NAPI polls, %d packets, %.1f%% NET_RX, %.1f%% NET_TX", cpu.CPU, cpu.NapiPolls, cpu.NapiWork, 100*cpu.NetRxShare, 100*cpu.NetTxShare)
	}
	agree(t, "softnet_stat processed vs dev_recv skbs on every device", total(events, "dev_recv", "skbs", nil), processed)
}

// runsPerPacket reports what the BPF programs ran per wire packet over the
// stream, with every family attached all the time, and fails where the
// receive path runs a program per wire packet beside its per-skb one:
// dev_recv's other programs must count per NAPI poll.
func runsPerPacket(t *testing.T, w *nicWire, before, after map[string]bpfUse, wirePackets float64) {
	t.Helper()
	var all uint64
	var names []string
	for name, u := range after {
		runs := u.sub(before[name]).runs
		all += runs
		if runs > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	runs := func(name string) float64 { return float64(after[name].sub(before[name]).runs) }
	var each []string
	for _, name := range names {
		each = append(each, fmt.Sprintf("%s %.3f", name, runs(name)/wirePackets))
	}
	t.Logf("BPF runs per wire packet (%.0f packets, both directions): %.2f in all; %s", wirePackets, float64(all)/wirePackets, strings.Join(each, ", "))
	recvFamily := runs("dev_recv") + runs("dev_recv_gro") + runs("dev_recv_polled")
	nicReport(t, "runs.tsv", fmt.Sprintf("%.2f\t%.2f", float64(all)/wirePackets, recvFamily/wirePackets))
	if beyond := recvFamily - runs("dev_recv"); beyond > runs("napi_poll") {
		t.Errorf("dev_recv ran %.0f times beyond once per skb, more than the %.0f NAPI polls: a run per wire packet before GRO", beyond, runs("napi_poll"))
	}
}

// oneTxQueue steers every CPU's transmissions on dev to its first transmit
// queue (XPS), so that on a multiqueue NIC (vmxnet3) streams from two CPUs
// meet in one qdisc, as on the others, rather than each running alone in
// its own; the settings travel with the NIC and are restored when the test
// ends.
func oneTxQueue(t *testing.T, ns *host.Netns, dev string) {
	t.Helper()
	dir := "/sys/class/net/" + dev + "/queues"
	out, err := ns.Run("sh", "-c", "cd "+dir+" && echo tx-*")
	if err != nil {
		t.Fatalf("listing the transmit queues of %s: %v", dev, err)
	}
	// A single queue has nothing to steer (and no xps_cpus to read).
	if len(strings.Fields(out)) < 2 {
		return
	}
	out, err = ns.Run("sh", "-c", "cd "+dir+" && for q in tx-*; do echo $q $(cat $q/xps_cpus); done")
	if err != nil {
		t.Fatalf("reading the XPS settings of %s: %v", dev, err)
	}
	queues := strings.Split(strings.TrimSpace(out), "\n")
	set := func(values map[string]string) error {
		var script []string
		for q, v := range values {
			script = append(script, fmt.Sprintf("echo %s > /sys/class/net/%s/queues/%s/xps_cpus", v, dev, q))
		}
		_, err := ns.Run("sh", "-c", strings.Join(script, " && "))
		return err
	}
	before, steer := map[string]string{}, map[string]string{}
	for _, line := range queues {
		q, v, _ := strings.Cut(line, " ")
		before[q], steer[q] = v, "0"
	}
	steer["tx-0"] = fmt.Sprintf("%x", 1<<runtime.NumCPU()-1)
	t.Cleanup(func() {
		if err := set(before); err != nil {
			t.Errorf("restoring the XPS settings of %s: %v", dev, err)
		}
	})
	if err := set(steer); err != nil {
		t.Fatalf("steering %s's transmissions to tx-0: %v", dev, err)
	}
	t.Logf("%d transmit queues on %s: every CPU's transmissions steered to tx-0", len(queues), dev)
}
