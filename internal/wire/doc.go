// Package wire holds the BPF ABI's types, generated from
// bpf/include/events.h (through the BTF of the loader's object): the
// events the kernel writes and the trace stores, and the map keys and
// values the recorder drains. The loader (probe) and the decoders (event,
// and through it every offline command) both import it, so reading a trace
// links no BPF loader.
package wire
