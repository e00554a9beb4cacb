package report

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze/pcap"
)

// A bursty flow's ACKs fall in few bins: the ACK and window lines hold
// their value between them and to the end, not empty paths under a legend.
func TestAckLineHoldsBetweenAcks(t *testing.T) {
	g := pcap.FlowGraph{Title: "a -> b", Points: []pcap.GraphPoint{
		{T: 0, HasData: true, SeqMax: 1000},
		{T: 1, HasAck: true, Ack: 1000, Win: 65000},
		{T: 2},
		{T: 3, HasData: true, SeqMin: 1000, SeqMax: 2000},
	}}
	svg := timeSequence(g)
	for _, color := range []string{"green", "orange"} {
		i := strings.Index(svg, `stroke="`+color+`"`)
		if i < 0 {
			t.Fatalf("no %s line:\n%s", color, svg)
		}
		d := svg[strings.LastIndex(svg[:i], `d="`):i]
		if !strings.Contains(d, "H") {
			t.Errorf("the %s line does not hold to the end: %s", color, d)
		}
	}
}
