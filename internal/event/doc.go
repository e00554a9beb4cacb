// Package event holds the decoded events that everything after collection
// shares: the parser, the analyzers and the renderers. Decoding turns the
// wire structs of bpf/include/events.h (as generated into package probe) into
// these values without allocating.
package event
