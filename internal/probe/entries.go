package probe

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// entriesBatchBytes bounds one batch's keys and values: tcp_stages' values
// are 9 KB each.
const entriesBatchBytes = 256 << 10

// EachEntry calls fn with each key and value of m, a map of one value per
// key. It reads in batches, which the kernel walks bucket by bucket: key by
// key, a key deleted under the walk restarts it, and a record beside 4098
// short connections gave up on tcp_stages ("iteration aborted"). Kernels
// without batch lookups (before 5.6) are walked key by key.
func EachEntry[K comparable, V any](m *ebpf.Map, fn func(K, V) error) error {
	var (
		k K
		v V
	)
	size := max(1, min(256, entriesBatchBytes/int(unsafe.Sizeof(k)+unsafe.Sizeof(v))))
	keys, values := make([]K, size), make([]V, size)
	var cursor ebpf.MapBatchCursor
	for first := true; ; first = false {
		n, err := m.BatchLookup(&cursor, keys, values, nil)
		if first && errors.Is(err, ebpf.ErrNotSupported) {
			return eachEntryByKey(m, fn)
		}
		if n == 0 && errors.Is(err, unix.ENOSPC) && len(keys) < int(m.MaxEntries()) {
			// A hash bucket holds more than a batch: nothing was read, so
			// a larger batch starts from the same place.
			keys, values = make([]K, 2*len(keys)), make([]V, 2*len(values))
			continue
		}
		for i := range n {
			if err := fn(keys[i], values[i]); err != nil {
				return err
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading map %s: %w", m, err)
		}
	}
}

func eachEntryByKey[K comparable, V any](m *ebpf.Map, fn func(K, V) error) error {
	var (
		key   K
		value V
	)
	it := m.Iterate()
	for it.Next(&key, &value) {
		if err := fn(key, value); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading map %s: %w", m, err)
	}
	return nil
}
