package probe

import (
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// A map whose keys come and go while it is read (sockets opening and
// closing beside a record) is read whole: every key that stays is seen,
// and the read never gives up. Key by key, each deleted key restarted the
// walk until it gave up ("iteration aborted"). (A plain hash: an LRU one
// evicts before it is full.)
func TestEachEntryReadsAMapThatChurns(t *testing.T) {
	testenv.RequireRoot(t, "creating a BPF map")
	type value struct{ Hist [1152]uint64 } // about tcp_stages' size
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 9216, MaxEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Keys 0-255 stay; 700 others live a moment each, so that the walk's
	// place is often a key about to go.
	const stable, churning = 256, 700
	for k := uint64(0); k < stable; k++ {
		if err := m.Put(k, value{Hist: [1152]uint64{k}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var v value
		for k := uint64(stable); ; k++ {
			select {
			case <-done:
				return
			default:
			}
			_ = m.Put(k, v)
			if k >= stable+churning {
				_ = m.Delete(k - churning)
			}
		}
	}()
	for range 50 {
		seen := map[uint64]bool{}
		err := EachEntry(m, func(k uint64, v value) error {
			if k < stable && v.Hist[0] != k {
				t.Errorf("key %d read with the value of %d", k, v.Hist[0])
			}
			seen[k] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k := uint64(0); k < stable; k++ {
			if !seen[k] {
				t.Fatalf("key %d, never deleted, was not read", k)
			}
		}
	}
	close(done)
	wg.Wait()
}
