// Package profile turns stack samples into where the CPU went: symbolized
// kernel and user stacks, each sample's context (syscall, softirq, hardirq,
// kernel thread, user, idle) and network-stack phase, and the phase table
// that joins CPU time with the packets and bytes of the same window. It
// reads and writes profiles as pprof (with skbtrace's metadata in its
// comments), folded stacks and flame graph pages. Sampling itself is
// collect/profiler's (root); this package works from files and links no BPF
// loader.
package profile
