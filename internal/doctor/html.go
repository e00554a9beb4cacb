package doctor

import (
	"fmt"
	"io"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/report/htmlreport"
)

// WriteHTML writes the report as one self-contained page: the findings,
// the run over time (tl, nil when not kept) and the settings, with the main
// flow's two ends side by side.
func (r *Report) WriteHTML(w io.Writer, tl *timeline.Timeline, generator string) error {
	ev := r.Evidence
	p := &htmlreport.Page{Title: "skbtrace doctor", Verdict: true, Findings: r.Findings, Healthy: r.Healthy,
		Timeline: tl, Notes: r.Notes, Generator: generator}
	if ev != nil {
		p.Facts = append(p.Facts, [2]string{"kernel", ev.Kernel}, [2]string{"observed", fmt.Sprintf("%.1f s on %d CPUs", ev.Seconds, ev.CPUCount)})
		if ev.Command != nil {
			p.Facts = append(p.Facts, [2]string{"command", strings.Join(ev.Command.Argv, " ")})
		}
		if r.Failed != "" {
			p.Facts = append(p.Facts, [2]string{"failed", r.Failed})
		}
		if r.NoTraffic != "" {
			p.Facts = append(p.Facts, [2]string{"no traffic observed", r.NoTraffic})
		}
		if r.Throughput != "" {
			p.Facts = append(p.Facts, [2]string{"throughput", r.Throughput})
		}
		for _, peer := range r.peers() {
			p.Facts = append(p.Facts, [2]string{"peer", peer})
		}
		events := "not recorded (tcp_info, counters and settings only)"
		if ev.KernelEvents {
			events = fmt.Sprintf("recorded, %d lost", ev.LostEvents)
		}
		p.Facts = append(p.Facts, [2]string{"kernel events", events})
		p.Settings = ev.Settings()
		if s := ev.senders(); len(s) > 0 {
			p.Ends = append(p.Ends, htmlreport.End{Netns: s[0].Netns, Dev: s[0].Dev})
			if peer := ev.peerFlow(s[0]); peer != nil && peer.Netns != s[0].Netns {
				p.Ends = append(p.Ends, htmlreport.End{Netns: peer.Netns, Dev: peer.Dev})
			}
		}
	}
	if tl == nil {
		p.Notes = append(p.Notes, "the run's series were not kept: run skbtrace doctor -o FILE.html to draw them")
	}
	return htmlreport.Write(w, p)
}
