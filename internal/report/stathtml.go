package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/report/htmlreport"
)

// WriteStatHTML writes a trace's story as one page: the run over time, the
// recording host's settings, and stat's text summary; damage says where a
// damaged trace stopped being readable.
func WriteStatHTML(w io.Writer, sum *analyze.Summary, st *analyze.Stat, tl *timeline.Timeline, summaryText, damage string) error {
	h := sum.Header
	p := &htmlreport.Page{Title: "skbtrace stat", Timeline: tl, Settings: sum.Settings, Appendix: summaryText, Damage: damage,
		Generator: "skbtrace " + h.Tool}
	p.Facts = append(p.Facts, [2]string{"host", fmt.Sprintf("%s, kernel %s, %d CPUs", h.Hostname, h.Kernel, h.CPUs)})
	if h.Command != "" {
		p.Facts = append(p.Facts, [2]string{"recorded", h.Command})
	}
	var events uint64
	for _, n := range sum.ByType {
		events += n
	}
	p.Facts = append(p.Facts, [2]string{"events", fmt.Sprintf("%d over %.2f s, %d lost", events, tl.Seconds, sum.TotalLost())})
	if sum.Sample != nil {
		p.Facts = append(p.Facts, [2]string{"sampled", fmt.Sprintf("%s attached %.0f %% of each interval: their rates are those of the attached windows",
			strings.Join(sum.Sample.Families, ", "), sum.Sample.Share*100)})
	}
	if sum.TotalLost() > 0 {
		var fams []string
		for f, n := range sum.Lost {
			if n > 0 {
				fams = append(fams, fmt.Sprintf("%s %d", f, n))
			}
		}
		sort.Strings(fams)
		p.Notes = append(p.Notes, "events lost by the kernel: "+strings.Join(fams, ", ")+"; the charts undercount there")
	}
	if !sum.Ended && damage == "" {
		p.Notes = append(p.Notes, "the trace has no end record: the recording was cut short")
	}
	if sum.Settings == nil {
		p.Notes = append(p.Notes, "the trace carries no settings (recorded by an older skbtrace)")
	}
	if len(tl.Flows) > 0 {
		f := tl.Flows[0]
		p.Ends = []htmlreport.End{{Netns: f.Netns}}
		// The other end is the socket of the same connection seen from
		// the peer, where the trace holds it.
		for _, c := range st.Connections {
			if ns := sum.Names.NetnsName(c.Netns); c.Local == f.Peer.String() && c.Peer == f.Local.String() && ns != "" && ns != f.Netns {
				p.Ends = append(p.Ends, htmlreport.End{Netns: ns})
				break
			}
		}
	}
	return htmlreport.Write(w, p)
}
