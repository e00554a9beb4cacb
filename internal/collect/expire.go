package collect

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// expire takes out of a family's map the entries that stayed unchanged
// for an interval, so that a map the kernel never empties (keyed by
// socket) holds only what is active. Each is looked up and deleted at
// once, so what the kernel added since the drain read it reaches rest
// (with the value reported so far) instead of being lost; a later sample
// makes a new entry, counted from zero. Kernels before 5.14 cannot do
// that for hash maps: there the entries stay, and a full map's samples
// are counted lost by the kernel.
func expire[K comparable, V any](d *drainer, m *ebpf.Map, keys []K, prev map[K]V, rest func(K, V, V) error) error {
	if m == nil || d.noExpire {
		return nil
	}
	for _, k := range keys {
		var v V
		err := m.LookupAndDelete(&k, &v)
		if errors.Is(err, ebpf.ErrNotSupported) {
			d.noExpire = true
			return nil
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			delete(prev, k)
			continue
		}
		if err != nil {
			return fmt.Errorf("taking an idle entry out of map %s: %w", m, err)
		}
		p := prev[k]
		delete(prev, k)
		if err := rest(k, v, p); err != nil {
			return err
		}
	}
	return nil
}
