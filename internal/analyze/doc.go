// Package analyze works on decoded event streams: restoring the kernel's
// sequence order across CPUs, finding gaps, and summarizing a recording.
package analyze
