package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// kindMaxPacingRate is a socket's SO_MAX_PACING_RATE as the observer
// reads it from the kernel's socket (observe/limits_window.go).
const kindMaxPacingRate = "so_max_pacing_rate"

// pacingCapped finds senders held by their own socket's pacing cap: the
// application set SO_MAX_PACING_RATE, the kernel paces the socket at it
// (TCP's internal pacing, which the option turns on without fq), and the
// sender waited on the pacing timer (tcp_sendlim [pacing]) while its rate
// stayed at the cap. It is a shaper of one socket: rate-shaped, its limit
// the option and its remedy the application's.
func pacingCapped(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, f := range ev.senders() {
		held := f.LimitShares["pacing"]
		lim := ev.flowLimit(kindMaxPacingRate, f)
		if lim == nil || held < limitShare {
			continue
		}
		capBytes, err := strconv.ParseUint(strings.Fields(lim.Value)[0], 10, 64)
		if err != nil || capBytes == 0 {
			continue
		}
		tx, capBits := f.SendBps(), float64(capBytes)*8
		// Paced below its cap the flow is held by something else too.
		if tx > 1.1*capBits || tx < 0.5*capBits {
			continue
		}
		impact, how := shaperImpact(ev, ev.DeviceNamed(f.Netns, f.Dev), tx, capBits)
		fd := finding.Finding{ID: "rate-shaped", Severity: finding.Warning,
			Title: fmt.Sprintf("%s -> %s is paced at its socket's cap: SO_MAX_PACING_RATE %s", f.Local, f.Peer, units.Bits(capBits)),
			Evidence: []string{
				fmt.Sprintf("%s sent %s, %s of its cap", f.Local, units.Bits(tx), pct(tx/capBits)),
				fmt.Sprintf("the sender waited on its pacing timer %s of the time (tcp_sendlim [pacing])", pct(held)),
			},
			Explanation: "SO_MAX_PACING_RATE caps how fast the kernel lets a socket send: TCP spaces its packets at no more than the rate " +
				"(its own pacing, or fq's), whatever the path could carry. It is a shaper of one socket, set by its application.",
			Scope: flowScope(f), Impact: impact,
			ImpactText: "everything above the cap: " + how, Confidence: finding.Strong,
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ss -ti src %s: pacing_rate and max_pacing_rate", f.Local)}}
		nameLimit(&fd, lim, "or raise the cap to what the flow should carry: setsockopt(SO_MAX_PACING_RATE, BYTES_PER_SECOND)")
		out = append(out, fd)
	}
	return out
}
