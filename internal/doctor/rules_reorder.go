package doctor

import (
	"fmt"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// spuriousShare is the share of a namespace's retransmissions that its
// receivers must have proven needless (DSACK) for the unproven rest to be
// taken as needless too. Reordering and early timers send segments twice,
// and not every duplicate draws a DSACK the sender counts: the receiver
// keeps one DSACK block per ACK (a second duplicate before the ACK leaves
// replaces or extends it), and the sender ignores DSACKs for data it has
// forgotten (TcpExt.TCPDSACKIgnoredOld, TCPDSACKIgnoredNoUndo). Healthy
// veth streams reordered between CPUs or queues had 83-99 % of their
// retransmissions proven and an unproven rest of 0.02-0.16 % of the
// segments, astride the 0.1 % bar of loss; real loss (a netfilter rule, a
// qdisc that overflows) has its drops located, which keeps the rest lost.
const spuriousShare = 0.8

// retransSplit is what one namespace's senders retransmitted over the
// observation, split into what the receivers proved needless, what is
// taken as needless with it, and the rest: what was lost.
type retransSplit struct {
	ns            string
	retrans, segs int64
	// proven: the receivers' DSACKs (TcpExt.TCPDSACKRecvSegs, or tcp_info
	// dsack_dups of the flows where that is more); provenBy names it.
	proven   int64
	provenBy string
	// assumed is the unproven rest, taken as needless (spuriousShare).
	assumed int64
	// reorders are the reorderings the senders detected (TcpExt
	// TCPSACKReorder, TCPTSReorder, TCPRenoReorder, or tcp_info reord_seen
	// where that is more); undos the window reductions TCP undid once it
	// saw its retransmissions were needless, spuriousRTOs the timeouts it
	// found early (F-RTO).
	reorders, undos, spuriousRTOs int64
}

// lost is what the senders retransmitted because segments were lost.
func (s retransSplit) lost() int64 { return s.retrans - s.proven - s.assumed }

// splitRetrans splits a namespace's retransmissions. located are the
// flows' packets whose loss was located (drops with a reason, a ring's or a
// backlog's misses): each needed its retransmission, so they stay lost
// and only the unproven rest beyond them is assumed needless.
func (ev *Evidence) splitRetrans(ns *Namespace, located uint64) retransSplit {
	c := ns.Counters
	s := retransSplit{ns: ns.Name, retrans: c["Tcp.RetransSegs"], segs: c["Tcp.OutSegs"]}
	s.proven, s.provenBy = dsackSegs(c), "TcpExt.TCPDSACKRecvSegs"
	if _, ok := c["TcpExt.TCPDSACKRecvSegs"]; !ok {
		s.provenBy = "TcpExt.TCPDSACKRecv, one segment per DSACK"
	}
	var flowDups, flowReord int64
	for i := range ev.Flows {
		if f := &ev.Flows[i]; f.Netns == ns.Name {
			flowDups += int64(f.DSACKDups)
			flowReord += int64(f.ReordSeen)
		}
	}
	// Before 5.10 the counter counts DSACKs, not segments; tcp_info counts
	// segments from 4.19.
	if flowDups > s.proven {
		s.proven, s.provenBy = flowDups, "the flows' tcp_info dsack_dups"
	}
	s.proven = max(0, min(s.retrans, s.proven))
	s.reorders = max(c["TcpExt.TCPSACKReorder"]+c["TcpExt.TCPTSReorder"]+c["TcpExt.TCPRenoReorder"], flowReord)
	s.undos = c["TcpExt.TCPFullUndo"] + c["TcpExt.TCPPartialUndo"] + c["TcpExt.TCPDSACKUndo"] + c["TcpExt.TCPLossUndo"]
	s.spuriousRTOs = c["TcpExt.TCPSpuriousRTOs"]
	if s.retrans > 0 && float64(s.proven) >= spuriousShare*float64(s.retrans) {
		s.assumed = max(0, s.retrans-s.proven-int64(min(located, uint64(s.retrans))))
	}
	return s
}

// describe is the split as evidence: the numbers and, where the rest is
// taken as needless, why.
func (s retransSplit) describe() []string {
	if s.retrans <= 0 {
		return nil
	}
	w := fmt.Sprintf("%d of %d segments sent in netns %s were retransmissions (Tcp.RetransSegs)", s.retrans, s.segs, s.ns)
	if s.proven > 0 {
		w += fmt.Sprintf(", %d of them (%s) proven needless by the receivers' DSACKs (%s)", s.proven, pct(share(s.proven, s.retrans)), s.provenBy)
	}
	out := []string{w}
	if s.assumed > 0 {
		out = append(out, fmt.Sprintf("the other %d (%s of the segments sent) taken as needless too: with %s or more proven needless, "+
			"the rest that no located drop explains is the same reordering or early timers, whose duplicates do not all draw a DSACK the sender counts",
			s.assumed, smallPct(share(s.assumed, s.segs)), pct(spuriousShare)))
	}
	var why []string
	if s.reorders > 0 {
		why = append(why, fmt.Sprintf("detected reordering %d times (TcpExt.TCPSACKReorder, TCPTSReorder, TCPRenoReorder; tcp_info reord_seen)", s.reorders))
	}
	if s.undos > 0 {
		why = append(why, fmt.Sprintf("undid %d window reductions on learning they were needless (TcpExt.TCPFullUndo, TCPPartialUndo, TCPDSACKUndo, TCPLossUndo)", s.undos))
	}
	if s.spuriousRTOs > 0 {
		why = append(why, fmt.Sprintf("found %d retransmission timeouts early (TcpExt.TCPSpuriousRTOs)", s.spuriousRTOs))
	}
	if len(why) > 0 && s.proven > 0 {
		out = append(out, fmt.Sprintf("the senders in netns %s %s", s.ns, strings.Join(why, ", ")))
	}
	return out
}

// smallPct prints a share of the segments, which the bar of loss puts at
// 0.1 %, with two decimals: "0.13 %" where pct says "0 %".
func smallPct(v float64) string { return fmt.Sprintf("%.2f %%", v*100) }

func share(n, of int64) float64 {
	if of <= 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// reordered says whether the path reorders: some namespace's senders
// detected reordering (TcpExt reordering counters, tcp_info reord_seen), or
// their receivers proved most of their retransmissions needless.
func (ev *Evidence) reordered() bool {
	for i := range ev.Namespaces {
		if s := ev.splitRetrans(&ev.Namespaces[i], 0); s.reorders >= minLocatedDrops ||
			s.retrans >= 10 && float64(s.proven) >= spuriousShare*float64(s.retrans) {
			return true
		}
	}
	return false
}

// lateCopy says whether a drop is a receiver's discard of a segment older
// than those it has (PAWS: its timestamp is older than the last in-order
// segment's) on a path that reorders: a copy that came late, most often of
// data already received, whose duplicate draws no DSACK (the receiver's
// answer to it is rate-limited, net.ipv4.tcp_invalid_ratelimit). A
// reordered veth stream had 19,433 such discards beside 17,966
// retransmissions its DSACKs did not prove.
func lateCopy(d *Drop, reordered bool) bool {
	return reordered && d.Reason == "TCP_RFC7323_PAWS"
}

// locatedLoss counts the flows' packets whose loss was located: drops with
// a reason (not routine, not late copies), packets a device's ring missed
// or a full backlog dropped, which no skb_drop sees.
func (ev *Evidence) locatedLoss() uint64 {
	reordered := ev.reordered()
	var n uint64
	for _, d := range ev.Drops {
		if !benign(&d) && !lateCopy(&d, reordered) && ev.suffered(&d) {
			n += d.Count
		}
	}
	n += ev.Softnet.Dropped
	for ns, d := range ev.devices {
		if o := ringOverflowOf(ns.Name, d); o != nil {
			n += o.missed
		}
	}
	return n
}

// needlessRetrans is packet-loss at info for retransmissions that would
// have passed the bar of loss had the receivers not proven them needless:
// the reader sees why the doctor calls them none.
func needlessRetrans(evidence []string, retrans, segs, needless int64) []finding.Finding {
	if retrans < 10 || float64(retrans) < 0.001*float64(segs) || needless == 0 {
		return nil
	}
	return []finding.Finding{{ID: "packet-loss", Severity: finding.Info,
		Title:    fmt.Sprintf("%d segments retransmitted and none lost: the receivers proved them needless, reordering or early timers sent them", retrans),
		Evidence: evidence,
		Explanation: "A segment that arrives out of order, or late, looks lost to its sender, which sends it again; the receiver reports " +
			"the duplicate (DSACK) and TCP undoes the window cut it made. Such retransmissions cost a little bandwidth, not throughput.",
		Scope: "path", Confidence: finding.Likely, ImpactText: "none: no segment was lost",
		Confirm: []string{"nstat -az TcpExtTCPDSACKRecvSegs TcpRetransSegs TcpExtTCPSACKReorder during the transfer: duplicates reported beside the retransmissions"}}}
}
