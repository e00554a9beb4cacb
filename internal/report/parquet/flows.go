package parquet

import (
	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/report"
)

// flowRow is one connection as `skbtrace stat --json` reports it, from the
// same computation (report.NewStatViewRows), with its span in the recording.
type flowRow struct {
	meta
	Sock      string   `parquet:"sock,dict"`
	Local     string   `parquet:"local,dict"`
	Peer      string   `parquet:"peer,dict"`
	Netns     int64    `parquet:"netns"`
	NetnsName string   `parquet:"netns_name,dict"`
	FirstNs   int64    `parquet:"first_ns"`
	LastNs    int64    `parquet:"last_ns"`
	Seconds   float64  `parquet:"seconds"`
	States    []string `parquet:"states,list"`
	// Null where the trace did not measure it (no tcp_rtt, no event with
	// the window), as stat's JSON has it.
	Bytes         *int64   `parquet:"bytes,optional"`
	BytesAcked    *int64   `parquet:"bytes_acked,optional"`
	BytesReceived *int64   `parquet:"bytes_received,optional"`
	Throughput    *float64 `parquet:"throughput_bytes_per_s,optional"`
	// LimitShare is each send-limit reason's share of the time in runs;
	// LimitDecisions counts the decisions (incoming ACKs) of each.
	LimitShare            reasons[float64] `parquet:"limit_share"`
	LimitDecisions        reasons[int64]   `parquet:"limit_decisions"`
	RetransSegs           int64            `parquet:"retrans_segs"`
	RTTMinUs              *int64           `parquet:"min_rtt_us,optional"`
	SRTTAvgUs             *float64         `parquet:"srtt_avg_us,optional"`
	SRTTMaxUs             *int64           `parquet:"srtt_max_us,optional"`
	CwndMin               *int64           `parquet:"cwnd_min,optional"`
	CwndMax               *int64           `parquet:"cwnd_max,optional"`
	CongStates            map[string]int64 `parquet:"cong_states"`
	Resets                int64            `parquet:"resets"`
	KernelBusyUs          int64            `parquet:"kernel_busy_us"`
	KernelRwndLimitedUs   int64            `parquet:"kernel_rwnd_limited_us"`
	KernelSndbufLimitedUs int64            `parquet:"kernel_sndbuf_limited_us"`
}

func (x *Exporter) writeFlows() error {
	view := report.NewStatViewRows(x.stat, x.sum)
	t, err := createTable[flowRow](x.dir, flowsTable)
	if err != nil {
		return err
	}
	// Each row is made as it is written: a trace can have hundreds of
	// thousands of connections.
	err = view.EachConn(nil, func(c *analyze.ConnStat, v *report.ConnView) error {
		r, err := t.next()
		if err != nil {
			return err
		}
		r.meta = x.meta
		r.Sock, r.Local, r.Peer = v.Sock, v.Local, v.Peer
		r.Netns, r.NetnsName = int64(c.Netns), x.sum.Names.NetnsName(c.Netns)
		r.FirstNs, r.LastNs, r.Seconds, r.States = c.First, c.Last, v.Seconds, v.States
		r.Bytes, r.BytesAcked, r.BytesReceived, r.Throughput = asInt64(v.Bytes()), asInt64(v.BytesAcked), asInt64(v.BytesReceived), v.ThroughputBps
		r.LimitShare.set(byName[float64, float64](v.LimitShare))
		r.LimitDecisions.set(byName[uint64, int64](v.LimitDecisions))
		r.RetransSegs, r.RTTMinUs, r.SRTTAvgUs, r.SRTTMaxUs = int64(v.RetransSegs), asInt64(v.MinRTTus), v.AvgSRTTus, asInt64(v.MaxSRTTus)
		r.CwndMin, r.CwndMax, r.Resets = asInt64(v.CwndMin), asInt64(v.CwndMax), int64(v.Resets)
		r.CongStates = make(map[string]int64, len(v.CongStates))
		for k, n := range v.CongStates {
			r.CongStates[k] = int64(n)
		}
		if k := v.Kernel; k != nil {
			r.KernelBusyUs, r.KernelRwndLimitedUs, r.KernelSndbufLimitedUs = int64(k.BusyUs), int64(k.RwndLimitedUs), int64(k.SndbufLimitedUs)
		}
		return nil
	})
	if err != nil {
		t.close()
		return err
	}
	return t.close()
}

// asInt64 carries a measured value into a nullable column.
func asInt64[T uint32 | uint64](v *T) *int64 {
	if v == nil {
		return nil
	}
	n := int64(*v)
	return &n
}
