package pcap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/packet"
	"github.com/skbtrace/skbtrace/internal/units"
)

// Report is the analysis of one capture.
type Report struct {
	Capture  CaptureInfo       `json:"capture"`
	Flows    []FlowReport      `json:"flows"`
	Tunnels  []TunnelReport    `json:"tunnels,omitempty"`
	Findings []finding.Finding `json:"findings"`
	Notes    []string          `json:"notes,omitempty"`
}

// CaptureInfo describes the capture as a whole.
type CaptureInfo struct {
	File       string  `json:"file"`
	Format     string  `json:"format"`
	Frames     uint64  `json:"frames"`
	NonIP      uint64  `json:"frames_without_tcp_or_udp"`
	Snapped    uint64  `json:"frames_cut_by_snaplen"`
	Truncated  uint64  `json:"frames_cut_inside_headers,omitempty"`
	Filtered   uint64  `json:"frames_filtered_out,omitempty"`
	Seconds    float64 `json:"seconds"`
	ICMPTooBig uint64  `json:"icmp_too_big,omitempty"`
	// IP fragments of TCP and UDP datagrams (not in NonIP), and their
	// datagrams; those no flow took, because their datagram's first
	// fragment is not in the capture.
	Fragments           uint64 `json:"ip_fragments,omitempty"`
	FragDatagrams       uint64 `json:"fragmented_datagrams,omitempty"`
	FragOrphans         uint64 `json:"fragments_without_first,omitempty"`
	FragOrphanDatagrams uint64 `json:"datagrams_without_first,omitempty"`
	// Malformed frames were skipped: by the header at fault, and the first few.
	Malformed       uint64            `json:"malformed_frames,omitempty"`
	MalformedByPart map[string]uint64 `json:"malformed_by_header,omitempty"`
	MalformedFirst  []MalformedFrame  `json:"malformed_first,omitempty"`
	// UnsupportedLinks counts the frames of link types not read, by type.
	UnsupportedLinks map[int]uint64 `json:"unsupported_link_frames,omitempty"`
	// Error is set when the capture is damaged: everything before it was analyzed.
	Error string `json:"error,omitempty"`
}

// FlowReport is one direction of a flow.
type FlowReport struct {
	Proto        string      `json:"proto"`
	Src          string      `json:"src"`
	Dst          string      `json:"dst"`
	Encap        string      `json:"encapsulation,omitempty"`
	Packets      uint64      `json:"packets"`
	DataPackets  uint64      `json:"data_packets"`
	PayloadBytes uint64      `json:"payload_bytes"`
	Seconds      float64     `json:"seconds"`
	Bps          float64     `json:"bits_per_second"`
	Location     string      `json:"capture_point,omitempty"` // Location* constants
	TCP          *TCPReport  `json:"tcp,omitempty"`
	Sizes        []SizeCount `json:"sizes"`
	OverMTU      *OverMTU    `json:"over_mtu,omitempty"`
	IPID         *IPIDReport `json:"ip_id,omitempty"`
	Fragments    *FragReport `json:"ip_fragments,omitempty"`
	MTU          int         `json:"mtu"`
}

// FragReport describes a direction's datagrams that came as IP fragments,
// counted by their first fragment. Whole ones were analyzed as segments
// of their full length; the others lack a fragment in the capture, and a
// receiver drops such a datagram.
type FragReport struct {
	Datagrams  uint64 `json:"datagrams"`
	Incomplete uint64 `json:"incomplete"`
	// CutAtEnd were still coming in when the capture ended.
	CutAtEnd uint64 `json:"cut_at_capture_end,omitempty"`
	// Unterminated never had a last fragment: every one said more was to
	// come, without a gap from the start. No receiver reassembles them.
	Unterminated uint64 `json:"unterminated,omitempty"`
	// Share is of the data segments: the datagrams over the data packets
	// and the incomplete datagrams.
	Share          float64 `json:"share_of_data_segments"`
	Fragments      uint64  `json:"fragments_of_whole_datagrams"`
	PerDatagram    float64 `json:"fragments_per_datagram"`
	MaxPerDatagram uint32  `json:"max_fragments_per_datagram"`
	DF             uint64  `json:"first_fragments_with_df"`
	AvgPayload     float64 `json:"average_payload"`
	MaxPayload     uint32  `json:"max_payload"`
	// SegmentLimit is the most payload one TCP segment may carry: the
	// MSS the receiver announced, else what the MTU holds (MSSFromSYN false).
	SegmentLimit uint32 `json:"segment_limit,omitempty"`
	MSSFromSYN   bool   `json:"segment_limit_from_handshake,omitempty"`
}

// TCPReport is what TCP's headers tell about a direction.
type TCPReport struct {
	Retransmissions   uint64 `json:"retransmissions"`
	RetransmittedSegs uint64 `json:"retransmitted_segments"`
	// MissedBytes is data the peer acknowledged that the capture never
	// held: packets the capture dropped, or lost before it.
	MissedBytes        uint64    `json:"missed_bytes"`
	OutOfOrder         uint64    `json:"out_of_order"`
	DupAcks            uint64    `json:"duplicate_acks_sent"`
	ZeroWindows        uint64    `json:"zero_windows_advertised"`
	ZeroWindowSeconds  float64   `json:"zero_window_seconds"`
	WindowLimitedShare float64   `json:"window_limited_share"`
	RTT                RTTReport `json:"rtt_at_capture_point"`
	// AckToDataP50us is the median time from the peer's ACK to the next
	// data sent: with the RTT, where the capture point lies.
	AckToDataP50us float64 `json:"ack_to_data_p50_us"`
	MSS            uint16  `json:"mss,omitempty"`
	WScale         int8    `json:"window_scale"`
	SACK           bool    `json:"sack_permitted"`
	Handshake      bool    `json:"handshake_seen"`
}

// RTTReport summarizes RTT samples: data to the ACK that covers it, as seen
// at the capture point (the whole RTT near the sender, little near the receiver).
type RTTReport struct {
	Samples uint64  `json:"samples"`
	MinUs   float64 `json:"min_us"`
	AvgUs   float64 `json:"avg_us"`
	P50Us   float64 `json:"p50_us"`
	P99Us   float64 `json:"p99_us"`
}

// SizeCount is one bucket of the packet-size distribution (IP bytes).
type SizeCount struct {
	UpTo    uint32 `json:"up_to"`
	Packets uint64 `json:"packets"`
}

// OverMTU describes frames larger than the MTU: coalesced or not yet segmented.
type OverMTU struct {
	Frames      uint64  `json:"frames"`
	Share       float64 `json:"share_of_data_packets"`
	AvgSegments float64 `json:"average_segments"`
	MadeBy      string  `json:"made_by"`
}

// IPIDReport is the IP-ID continuity of a flow's DF=0 packets.
type IPIDReport struct {
	Packets      uint64      `json:"df0_packets"`
	Pairs        uint64      `json:"consecutive_pairs"`
	Incrementing uint64      `json:"incrementing"`
	Fixed        uint64      `json:"fixed"`
	Unmergeable  uint64      `json:"unmergeable"`
	Share        float64     `json:"unmergeable_share"`
	Examples     [][2]uint16 `json:"jumps,omitempty"`
}

// TunnelReport is the outer IP-ID continuity of one tunnel flow.
type TunnelReport struct {
	Src  string     `json:"outer_src"`
	Dst  string     `json:"outer_dst"`
	VNI  uint32     `json:"vni"`
	IPID IPIDReport `json:"outer_ip_id"`
}

// Report summarizes what the analyzer saw.
func (a *Analyzer) Report(file, format string, readErr error) *Report {
	r := &Report{Capture: CaptureInfo{File: file, Format: format, Frames: a.Frames, NonIP: a.NonIP, Snapped: a.Snapped, Truncated: a.Truncated,
		Filtered: a.Filtered, ICMPTooBig: a.ICMPTooBig, Fragments: a.Fragments, FragDatagrams: a.FragDatagrams}}
	// Datagrams still open at the end are as incomplete as those given up,
	// unless the capture's end cut them.
	a.markCutAtEnd()
	frames, datagrams := a.openOrphans()
	r.Capture.FragOrphans, r.Capture.FragOrphanDatagrams = a.FragOrphans+frames, a.FragOrphanDatagrams+datagrams
	if a.Last > a.First {
		r.Capture.Seconds = float64(a.Last-a.First) / 1e9
	}
	switch {
	case errors.Is(readErr, packet.ErrLinkType):
		r.Capture.Error = readErr.Error()
		r.Notes = append(r.Notes, "every frame has a link type this analysis does not read ("+readErr.Error()+"): nothing was analyzed")
	case readErr != nil:
		r.Capture.Error = readErr.Error()
		r.Notes = append(r.Notes, "the capture is damaged: "+readErr.Error()+"; everything before it was analyzed")
	}
	r.Capture.UnsupportedLinks = a.UnsupportedLinks
	var missed uint64
	var short int
	for _, d := range a.Flows() {
		f := a.flowReport(d)
		if f.TCP != nil && f.TCP.MissedBytes > 0 {
			missed += f.TCP.MissedBytes
			short++
		}
		r.Flows = append(r.Flows, f)
	}
	if missed > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s that %s had acknowledged is not in the capture (missed data): "+
			"their byte counts and rates are short of what they moved; the capture dropped packets (tcpdump's \"dropped by kernel\": "+
			"a larger -B buffer, a snaplen such as -s 128, or writing to a faster disk helps) or they were lost before its capture point",
			units.Bytes(missed), units.Count(short, "TCP flow direction", "TCP flow directions")))
	}
	for _, o := range a.outerOrder {
		if o.IPID.Packets > 0 {
			r.Tunnels = append(r.Tunnels, TunnelReport{Src: o.Key.Src.String(), Dst: o.Key.Dst.String(), VNI: o.VNI, IPID: ipidReport(&o.IPID)})
		}
	}
	for _, n := range a.Malformed {
		r.Capture.Malformed += n
	}
	r.Capture.MalformedByPart, r.Capture.MalformedFirst = a.Malformed, a.MalformedFirst
	if c := r.Capture; c.FragOrphans > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d IP fragments of %d datagrams came without their first fragment, which holds the ports "+
			"(lost before the capture point, or by the capture): counted, in no flow", c.FragOrphans, c.FragOrphanDatagrams))
	}
	if a.Truncated > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s cut by the snaplen inside a header the analysis reads; sizes still come from the IP length fields", units.Count(a.Truncated, "frame", "frames")))
	}
	r.Findings = a.findings(r)
	finding.Rank(r.Findings)
	if r.Findings == nil {
		r.Findings = []finding.Finding{}
	}
	return r
}

func (a *Analyzer) flowReport(d *Dir) FlowReport {
	f := FlowReport{Proto: "udp", Src: d.Key.Src.String(), Dst: d.Key.Dst.String(), Packets: d.Packets, DataPackets: d.DataPackets,
		PayloadBytes: d.PayloadBytes, Seconds: d.Duration(), Bps: d.Throughput(), MTU: a.mtu(d)}
	switch d.Encap {
	case 1:
		f.Encap = "vxlan"
	case 2:
		f.Encap = "geneve"
	}
	for i, n := range d.Sizes {
		if n > 0 {
			f.Sizes = append(f.Sizes, SizeCount{UpTo: sizeBounds[i], Packets: n})
		}
	}
	if d.Key.Proto == 6 {
		f.Proto = "tcp"
		f.Location = a.location(d)
		t := &TCPReport{Retransmissions: d.Retrans, RetransmittedSegs: d.RetransSg, OutOfOrder: d.OutOfOrd, MSS: d.MSS,
			WScale: d.WScale, SACK: d.SACKOK, Handshake: d.sawSYN,
			RTT: RTTReport{Samples: d.RTT.Count, MinUs: d.RTT.Min, AvgUs: d.RTT.Avg(), P50Us: d.RTT.Quantile(0.5), P99Us: d.RTT.Quantile(0.99)}}
		t.AckToDataP50us = d.AckToData.Quantile(0.5)
		t.MissedBytes = d.missed()
		t.DupAcks = d.rev.DupAcks
		t.ZeroWindows, t.ZeroWindowSeconds = d.rev.ZeroWindows, float64(d.rev.ZeroWindowNs)/1e9
		if d.Last > d.First {
			t.WindowLimitedShare = float64(d.WindowLimitedNs) / float64(d.Last-d.First)
		}
		f.TCP = t
	}
	if d.OverMTU > 0 && d.DataPackets > 0 {
		o := &OverMTU{Frames: d.OverMTU, Share: float64(d.OverMTU) / float64(d.DataPackets)}
		o.AvgSegments = float64(d.OverMTUSegs) / float64(d.OverMTU)
		split, known := d.splitAfterCapture()
		if d.DataOut+d.DataIn > 0 {
			// The frames' direction settles it: sent frames are before
			// segmentation, received ones after coalescing.
			split, known = f.Location == LocationSender, f.Location != LocationBetween
		}
		acks := d.AcksAligned + d.AcksInside
		switch {
		case known && split || !known && f.Location == LocationSender:
			o.MadeBy = "sender TSO/GSO (captured before segmentation)"
		case known || f.Location == LocationReceiver:
			o.MadeBy = "receiver GRO/LRO (captured after coalescing)"
		case d.takenWhole():
			// Nothing segmented the frames after the capture point, and
			// the timing, as when both ends are on one host, does not say
			// which end made them (a capture on the receiving veth of an
			// iperf3 stream: 870 ACKs, all on a frame's end).
			known = true
			o.MadeBy = "sender TSO/GSO carried whole (both ends on one host, as over veth or loopback) or receiver GRO/LRO: " +
				"the receiver took each frame whole, and the timing does not place the capture"
		case acks < minAcks:
			o.MadeBy = fmt.Sprintf("offload, at an unknown end (%d ACKs matched a captured frame, too few to tell, and the timing does not place the capture)", acks)
		default:
			o.MadeBy = fmt.Sprintf("offload, at an unknown end (%d of %d ACKs fell inside a captured frame: some were segmented after the capture point, not all; "+
				"the timing does not place the capture)", d.AcksInside, acks)
		}
		if d.DataOut+d.DataIn > 0 {
			o.MadeBy += fmt.Sprintf("; the capture marks %d data frames sent and %d received here", d.DataOut, d.DataIn)
		} else if known {
			o.MadeBy += fmt.Sprintf("; %d of %d ACKs fell inside a captured frame", d.AcksInside, acks)
		}
		f.OverMTU = o
	}
	if d.IPID.Packets > 0 {
		r := ipidReport(&d.IPID)
		f.IPID = &r
	}
	if d.Frag.Datagrams > 0 {
		f.Fragments = a.fragReport(d)
	}
	return f
}

func (a *Analyzer) fragReport(d *Dir) *FragReport {
	fs := &d.Frag
	unterminated := fs.Unterminated + fs.unterminatedOpen
	r := &FragReport{Datagrams: fs.Datagrams, Incomplete: fs.Datagrams - fs.Whole - fs.CutAtEnd - unterminated, CutAtEnd: fs.CutAtEnd, Unterminated: unterminated,
		Fragments: fs.Frames, MaxPerDatagram: fs.MaxFrames, DF: fs.DF, MaxPayload: fs.MaxPayload}
	if segs := d.DataPackets + r.Incomplete + r.CutAtEnd + r.Unterminated; segs > 0 {
		r.Share = min(1, float64(fs.Datagrams)/float64(segs))
	}
	if fs.Whole > 0 {
		r.PerDatagram = float64(fs.Frames) / float64(fs.Whole)
		r.AvgPayload = float64(fs.Payload) / float64(fs.Whole)
	}
	if d.Key.Proto == 6 {
		r.SegmentLimit, r.MSSFromSYN = uint32(d.rev.MSS), d.rev.MSS > 0
		if !r.MSSFromSYN {
			hdr := 40
			if d.Key.Src.Addr().Is6() {
				hdr = 60
			}
			r.SegmentLimit = uint32(max(a.mtu(d)-hdr, 0))
		}
	}
	return r
}

func ipidReport(t *idTrack) IPIDReport {
	r := IPIDReport{Packets: t.Packets, Pairs: t.Pairs, Incrementing: t.Incrementing, Fixed: t.Fixed, Unmergeable: t.Unmergeable,
		Share: t.UnmergeableShare()}
	for i := 0; i < t.examples; i++ {
		r.Examples = append(r.Examples, t.Examples[i])
	}
	return r
}

// WriteJSON writes the report for machines.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// maxTextFlows keeps the text report readable: the busiest directions.
const maxTextFlows = 20

// WriteText writes the report for people: findings first, then the flows.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	c := r.Capture
	fmt.Fprintf(&b, "capture %s (%s): %d frames in %.3f s, ", c.File, c.Format, c.Frames, c.Seconds)
	if c.Fragments > 0 {
		fmt.Fprintf(&b, "%d IP fragments of %d datagrams, ", c.Fragments, c.FragDatagrams)
	}
	fmt.Fprintf(&b, "%d without TCP or UDP", c.NonIP)
	if c.Filtered > 0 {
		fmt.Fprintf(&b, ", %d filtered out", c.Filtered)
	}
	if c.Snapped > 0 {
		fmt.Fprintf(&b, ", %d cut by the snaplen", c.Snapped)
	}
	b.WriteString("\n")
	for _, link := range slices.Sorted(maps.Keys(c.UnsupportedLinks)) {
		fmt.Fprintf(&b, "%s of unsupported link type %d skipped (supported: %s)\n", units.Count(c.UnsupportedLinks[link], "frame", "frames"), link, packet.SupportedLinks)
	}
	if c.Malformed > 0 {
		noun := "frames"
		if c.Malformed == 1 {
			noun = "frame"
		}
		fmt.Fprintf(&b, "%d malformed %s skipped (", c.Malformed, noun)
		for i, part := range slices.Sorted(maps.Keys(c.MalformedByPart)) {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", part, c.MalformedByPart[part])
		}
		b.WriteString("):")
		for i, m := range c.MalformedFirst {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " #%d %s", m.Number, m.Why)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	if len(r.Findings) > 0 {
		finding.AppendText(&b, r.Findings)
	} else {
		b.WriteString("no findings\n\n")
	}
	for i, f := range r.Flows {
		if i == maxTextFlows {
			fmt.Fprintf(&b, "... %d more flow directions (--json lists all)\n", len(r.Flows)-i)
			break
		}
		fmt.Fprintf(&b, "%s %s -> %s%s: %d packets (%d with data), %s in %.3f s = %s\n", f.Proto, f.Src, f.Dst, encapSuffix(f.Encap),
			f.Packets, f.DataPackets, units.Bytes(f.PayloadBytes), f.Seconds, units.Bits(f.Bps))
		if t := f.TCP; t != nil {
			fmt.Fprintf(&b, "  retransmitted %d packets (%d segments), %d out of order, %d duplicate ACKs back, window-limited %.0f %%",
				t.Retransmissions, t.RetransmittedSegs, t.OutOfOrder, t.DupAcks, t.WindowLimitedShare*100)
			if t.ZeroWindows > 0 {
				fmt.Fprintf(&b, ", %d zero windows back (%.3f s)", t.ZeroWindows, t.ZeroWindowSeconds)
			}
			if t.MissedBytes > 0 {
				fmt.Fprintf(&b, ", missed %s (acknowledged, never captured)", units.Bytes(t.MissedBytes))
			}
			b.WriteString("\n")
			if t.RTT.Samples > 0 {
				fmt.Fprintf(&b, "  rtt at the capture point: min %.0f avg %.0f p50 %.0f p99 %.0f us (%d samples)\n",
					t.RTT.MinUs, t.RTT.AvgUs, t.RTT.P50Us, t.RTT.P99Us, t.RTT.Samples)
			}
			if t.Handshake {
				fmt.Fprintf(&b, "  handshake: mss %d, window scale %d, sack %v\n", t.MSS, t.WScale, t.SACK)
			}
		}
		if f.Location != "" {
			fmt.Fprintf(&b, "  captured %s\n", f.Location)
		}
		var sizes []string
		for _, s := range f.Sizes {
			sizes = append(sizes, fmt.Sprintf("<=%d:%d", s.UpTo, s.Packets))
		}
		fmt.Fprintf(&b, "  sizes (IP bytes): %s\n", strings.Join(sizes, " "))
		if o := f.OverMTU; o != nil {
			fmt.Fprintf(&b, "  %d frames above MTU %d (%.0f %% of data packets), %.1f segments each: %s\n", o.Frames, f.MTU, o.Share*100, o.AvgSegments, o.MadeBy)
		}
		if fr := f.Fragments; fr != nil {
			fmt.Fprintf(&b, "  IP fragments: %d of %d data segments (%.0f %%) came as fragments, %.1f per datagram (at most %d); DF set on %d of %d first fragments\n",
				fr.Datagrams, f.DataPackets+fr.Incomplete+fr.CutAtEnd+fr.Unterminated, fr.Share*100, fr.PerDatagram, fr.MaxPerDatagram, fr.DF, fr.Datagrams)
			fmt.Fprintf(&b, "  fragmented datagrams: %.0f bytes of payload on average, at most %d", fr.AvgPayload, fr.MaxPayload)
			if fr.SegmentLimit > 0 {
				fmt.Fprintf(&b, ", against %s", segmentLimit(fr))
			}
			if fr.Incomplete > 0 {
				fmt.Fprintf(&b, "; %d incomplete in the capture (a fragment missing: not analyzed as segments)", fr.Incomplete)
			}
			if fr.CutAtEnd > 0 {
				fmt.Fprintf(&b, "; %d cut by the capture's end", fr.CutAtEnd)
			}
			if fr.Unterminated > 0 {
				fmt.Fprintf(&b, "; %d never ended (fragments from the start, no last one: not ended by the fragmenting side, or their end lost)", fr.Unterminated)
			}
			b.WriteString("\n")
		}
		if id := f.IPID; id != nil {
			fmt.Fprintf(&b, "  DF=0 IP IDs: %d pairs, %d incrementing, %d fixed, %d jumps (%.0f %% unmergeable)\n",
				id.Pairs, id.Incrementing, id.Fixed, id.Unmergeable, id.Share*100)
		}
	}
	for _, t := range r.Tunnels {
		fmt.Fprintf(&b, "tunnel %s -> %s vni %d: outer DF=0 IP IDs: %d pairs, %d incrementing, %d fixed, %d jumps (%.0f %% unmergeable)\n",
			t.Src, t.Dst, t.VNI, t.IPID.Pairs, t.IPID.Incrementing, t.IPID.Fixed, t.IPID.Unmergeable, t.IPID.Share*100)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func encapSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (inside " + e + ")"
}

// segmentLimit names the most payload one TCP segment may carry, and whence.
func segmentLimit(fr *FragReport) string {
	if fr.MSSFromSYN {
		return fmt.Sprintf("the MSS of %d the receiver announced", fr.SegmentLimit)
	}
	return fmt.Sprintf("the %d bytes of payload the MTU holds (no handshake in the capture)", fr.SegmentLimit)
}
