package lab

import (
	"fmt"

	"github.com/skbtrace/skbtrace/internal/load"
)

func init() { Variants = append(Variants, pacingVariants...) }

// pacingCap is the fault's SO_MAX_PACING_RATE: 100 Mbit/s, under a
// three-hundredth of a stream's rate over veth here and an eighth of one
// in the kernel matrix's emulated guests (700-900 Mbit/s).
const pacingCap = 12_500_000

// pacingVariants cap a sender's rate in its own socket: a shaper no qdisc
// shows.
var pacingVariants = []*Scenario{
	{
		Name: "rate-so-max-pacing-rate",
		Mechanism: "the sending application caps its socket's rate (SO_MAX_PACING_RATE), which turns on TCP's own pacing " +
			"without fq: a shaper of one socket, no qdisc on the path",
		Fault:     fmt.Sprintf("the sender sets SO_MAX_PACING_RATE %d bytes/s (100 Mbit/s) on its socket (control: none)", pacingCap),
		Expect:    "rate-shaped",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		FaultLoad: func(o *load.Options) { o.MaxPacingRate = pacingCap },
		FixLoad:   func(o *load.Options) { o.MaxPacingRate = 0 },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			share, before := f.limitShare("pacing"), c.limitShare("pacing")
			return fmt.Sprintf("tcp_sendlim [pacing] %.0f %% of the sender's time (control %.0f %%); throughput %s", share*100, before*100, change(c, f)),
				share > 0.5 && f.Load.Bps < 1.2*pacingCap*8 && c.Load.Bps > 3*pacingCap*8
		},
	},
}
