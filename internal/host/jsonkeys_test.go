package host

import (
	"encoding/json"
	"testing"
)

// Evidence written before the counters had JSON tags still reads.
func TestCountersReadEitherKeyStyle(t *testing.T) {
	for _, in := range []string{`{"Processed":5,"Dropped":1,"TimeSqueeze":2}`, `{"processed":5,"dropped":1,"time_squeeze":2}`} {
		var s Softnet
		if err := json.Unmarshal([]byte(in), &s); err != nil || s != (Softnet{5, 1, 2}) {
			t.Errorf("%s: %+v %v", in, s, err)
		}
	}
	var l LinkStats
	if err := json.Unmarshal([]byte(`{"RxPackets":3,"TxErrors":4}`), &l); err != nil || l.RxPackets != 3 || l.TxErrors != 4 {
		t.Errorf("%+v %v", l, err)
	}
	b, err := json.Marshal(Softnet{5, 1, 2})
	if err != nil || string(b) != `{"processed":5,"dropped":1,"time_squeeze":2}` {
		t.Errorf("written as %s, %v", b, err)
	}
}
