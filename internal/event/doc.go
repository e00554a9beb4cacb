// Package event is the registry of the event families and the decoded
// events everything after collection shares. Each family has a file of its
// own (family_*.go): its id and name, its hooks with their fallbacks per
// kernel, whether it is sampled, how its records decode from the wire
// structs of bpf/include/events.h (generated into package wire) without
// allocating, and the fields its lines show. The recorder attaches what
// the registry lists; the parser, the analyzers and the renderers read
// what it decodes; none of them links the BPF loader through it.
package event
