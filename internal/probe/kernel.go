package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/skbtrace/skbtrace/internal/event"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// kernelTypes decodes the kernel's BTF once for the process: every program
// load (CO-RE relocations, tp_btf targets) and every prototype lookup would
// otherwise decode it again, about a tenth of a second each here and seconds
// under emulation.
var kernelTypes = btf.NewCache()

var tracefsDirs = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

var tracefsOnce struct {
	sync.Once
	err error
}

// EnsureTracefs makes tracefs available, mounting it at /sys/kernel/tracing
// when no mount exists: classic tracepoints are attached by their tracefs id.
func EnsureTracefs() error {
	tracefsOnce.Do(func() {
		if tracefsDir() != "" {
			return
		}
		for _, d := range tracefsDirs {
			if _, err := os.Stat(filepath.Join(d, "events")); errors.Is(err, os.ErrPermission) {
				tracefsOnce.err = fmt.Errorf("reading tracefs at %s: %w", d, ErrPermission)
				return
			}
		}
		if err := unix.Mount("nodev", tracefsDirs[0], "tracefs", 0, ""); err != nil {
			tracefsOnce.err = fmt.Errorf("mounting tracefs at %s: %w", tracefsDirs[0], err)
		}
	})
	return tracefsOnce.err
}

func tracefsDir() string {
	for _, d := range tracefsDirs {
		if _, err := os.Stat(filepath.Join(d, "events")); err == nil {
			return d
		}
	}
	return ""
}

// CheckHook says why a hook cannot be attached on this kernel, or nil.
// It reads BTF and tracefs only: whether the program loads is for Open.
func CheckHook(h event.Hook) error {
	switch h.Kind {
	case event.Iterator:
		return nil // iterators exist on every kernel with BTF tracing, which the tp_btf hooks already check
	case event.BTFTracepoint:
		n, err := TracepointArgs(h.Name)
		if err == nil && n < h.Args {
			err = fmt.Errorf("tracepoint %s passes %d arguments here, not the %d of the version this hook needs", h.Name, n, h.Args)
		}
		return err
	case event.FEntry, event.FExit:
		n, err := FunctionArgs(h.Name)
		if err != nil {
			return err
		}
		if n != h.Args {
			return fmt.Errorf("function %s takes %d arguments here, not the %d the program reads", h.Name, n, h.Args)
		}
		return nil
	default:
		if err := EnsureTracefs(); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(tracefsDir(), "events", h.Group, h.Name)); err != nil {
			return fmt.Errorf("tracepoint %s:%s is not in this kernel", h.Group, h.Name)
		}
		return nil
	}
}

// KernelEnum names the values of a kernel enum from its BTF, with prefix
// removed (SKB_DROP_REASON_NETFILTER_DROP becomes NETFILTER_DROP).
func KernelEnum(name, prefix string) (map[uint32]string, error) {
	spec, err := kernelTypes.Kernel()
	if err != nil {
		return nil, fmt.Errorf("reading kernel BTF: %w", err)
	}
	var enum *btf.Enum
	if err := spec.TypeByName(name, &enum); err != nil {
		return nil, fmt.Errorf("looking up enum %s in kernel BTF: %w", name, err)
	}
	names := make(map[uint32]string, len(enum.Values))
	for _, v := range enum.Values {
		names[uint32(v.Value)] = strings.TrimPrefix(v.Name, prefix)
	}
	return names, nil
}

// LoadOptions are the options for loading other packages' BPF objects (the
// lab's): the process's decoded kernel BTF serves their loads too.
func LoadOptions() *ebpf.CollectionOptions {
	return &ebpf.CollectionOptions{Cache: kernelTypes}
}
