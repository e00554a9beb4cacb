package lab

import (
	"testing"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/load"
)

func TestSendBufferVerdictNeedsTheWaitsAndEitherALossOrASaturatedControl(t *testing.T) {
	run := func(bps float64, idle ...float64) *Measurement {
		m := &Measurement{Load: &load.Result{Bps: bps}}
		for i, v := range idle {
			m.CPU = append(m.CPU, doctor.CPUUse{CPU: i, Idle: v})
		}
		return m
	}
	for _, tc := range []struct {
		name          string
		share, before float64
		c, f          *Measurement
		want          bool
	}{
		// 5.10 TCG guest: 182 against 408 Mbit/s.
		{"slower", 0.94, 0, run(408e6, 0.3, 0.4), run(182e6, 0.5, 0.5), true},
		// 6.12 TCG guest: 238 against 272 Mbit/s, the control's CPU saturated.
		{"cpu-bound control", 0.95, 0, run(272e6, 0.02, 0.4), run(238e6, 0.1, 0.5), true},
		// 5.10 TCG guest: 425 against 488 Mbit/s, the control's CPU 89 %
		// busy; 95 % of the time on the buffer against none is the fault.
		{"nearly all the time on the buffer", 0.95, 0, run(488e6, 0.11, 0.4), run(425e6, 0.1, 0.5), true},
		{"neither slower nor cpu-bound", 0.8, 0, run(272e6, 0.3, 0.4), run(238e6, 0.1, 0.5), false},
		{"waits no longer than the control's", 0.6, 0.45, run(408e6, 0.3, 0.4), run(182e6, 0.5, 0.5), false},
		{"waits under half the time", 0.4, 0, run(408e6, 0.3, 0.4), run(182e6, 0.5, 0.5), false},
	} {
		text, got := sndbufJudged(tc.share, tc.before, tc.c, tc.f)
		if got != tc.want {
			t.Errorf("%s: reproduced=%v, want %v (%s)", tc.name, got, tc.want, text)
		}
	}
}

// QEMU 7.2's e1000e hands every packet unverified with rx off and none
// with rx on; its e1000 and vmxnet3 hand every one unverified either way,
// which no setting changes: not a fault they can build.
func TestReceiveChecksumsProvedByThePacketsTheDriverLeftUnverified(t *testing.T) {
	s, ok := ByName("nic-rx-csum-off")
	if !ok {
		t.Fatal("no nic-rx-csum-off scenario")
	}
	run := func(none, verified uint64) *Measurement {
		return &Measurement{Load: &load.Result{Bps: 100e6}, RxChecksums: RxChecksums{None: none, Verified: verified}}
	}
	p := &Pair{ReceiverDev: "eth1"}
	for _, tc := range []struct {
		name       string
		c, f       *Measurement
		unbuilt    bool
		reproduced bool
	}{
		{"e1000e", run(0, 32566), run(19937, 0), false, true},
		{"e1000: unverified with rx on too", run(26814, 0), run(26000, 0), true, false},
		{"the setting did not take", run(3, 30000), run(2, 30000), false, false},
		{"too few packets to tell", run(0, 500), run(400, 0), false, false},
	} {
		if why := s.Unbuilt(tc.c, tc.f, p); (why != "") != tc.unbuilt {
			t.Errorf("%s: unbuilt %q, want %v", tc.name, why, tc.unbuilt)
		}
		if text, got := s.Verdict(tc.c, tc.f, p); got != tc.reproduced {
			t.Errorf("%s: reproduced=%v, want %v (%s)", tc.name, got, tc.reproduced, text)
		}
	}
}

// CI's small-packet runs, watched by the doctor, read 0.46 and 0.21 of the
// control's send calls: still per-packet cost. A sender that hardly sent,
// or 64-byte writes that kept the bits, is not.
func TestSmallPacketVerdictAllowsTheDoctorsPerCallCost(t *testing.T) {
	m := func(bps float64) *Measurement { return &Measurement{Load: &load.Result{Bps: bps}} }
	for _, tc := range []struct {
		control, fault, controlCalls, faultCalls float64
		want                                     bool
	}{
		{1900e6, 70e6, 169631, 77387, true},
		{732e6, 34.7e6, 95754, 20265, true},
		{732e6, 34.7e6, 95754, 9000, false},  // under the doctor's 20 000
		{1900e6, 70e6, 400000, 40000, false}, // a tenth of the control's calls: stalled, not per packet
		{1900e6, 900e6, 169631, 1.7e6, false},
	} {
		if _, got := sockSmallVerdict(m(tc.control), m(tc.fault), tc.controlCalls, tc.faultCalls); got != tc.want {
			t.Errorf("%+v: reproduced %v, want %v", tc, got, tc.want)
		}
	}
}
