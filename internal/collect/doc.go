// Package collect runs the kernel side: it checks which of the registered
// event families (package event) can run on this kernel and why not,
// attaches them through package probe, samples the per-packet ones, drains
// the families that aggregate in kernel maps (drains, by family id), and
// records what they emit into a trace.
package collect
