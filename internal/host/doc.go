// Package host reads evidence and metadata from the running host: clocks,
// identity, network namespaces. Parsing is separate from file access where
// there is anything to parse, so tests run on fixtures without root.
package host
