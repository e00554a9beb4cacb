package collect

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/skbtrace/skbtrace/internal/wire"
)

// A total below the previous one is a new count (the entry was taken out
// and made anew): reported from zero, never as a wrapped difference.
func TestEmitStageNeverWraps(t *testing.T) {
	d := newDrainer(nil, nil, binary.NativeEndian, 0)
	var sum, p wire.TcpStageStats
	p.Stage[wire.TcpStageSTAGE_ACK] = wire.StageHist{Count: 9, SumNs: 900}
	sum.Stage[wire.TcpStageSTAGE_ACK] = wire.StageHist{Count: 2, SumNs: 150}
	sum.Stage[wire.TcpStageSTAGE_ACK].Hist[3] = 2
	for _, c := range []struct {
		name      string
		prev      wire.TcpStageStats
		wantCount uint64
	}{{"restarted", p, 2}, {"grown", wire.TcpStageStats{}, 2}} {
		d.pending = nil
		if err := emitStage(d, wire.TcpStageKey{Sock: 1, BornNs: 2}, &sum, &c.prev); err != nil {
			t.Fatal(err)
		}
		var ev wire.TcpStageEvent
		if err := binary.Read(bytes.NewReader(d.pending[0]), binary.NativeEndian, &ev); err != nil {
			t.Fatal(err)
		}
		ack := ev.Stage[wire.TcpStageSTAGE_ACK]
		if ack.Count != c.wantCount || ack.SumNs != 150 || ack.Hist[3] != 2 || ev.Sock != 1 {
			t.Errorf("%s: ack stage %d samples, %d ns, bucket 3 %d, sock %d; want 2, 150, 2, 1", c.name, ack.Count, ack.SumNs, ack.Hist[3], ev.Sock)
		}
	}
}

func TestEmitSkLimitNeverWraps(t *testing.T) {
	d := newDrainer(nil, nil, binary.NativeEndian, 0)
	if err := emitSkLimit(d, wire.SkLimitKey{Sock: 1}, wire.SkLimitStats{Cnt: 3}, wire.SkLimitStats{Cnt: 7}); err != nil {
		t.Fatal(err)
	}
	var ev wire.SkLimitEvent
	if err := binary.Read(bytes.NewReader(d.pending[0]), binary.NativeEndian, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Cnt != 3 {
		t.Errorf("a restarted count of 3 after 7 was reported as %d, want 3", ev.Cnt)
	}
}
