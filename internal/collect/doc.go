// Package collect runs the kernel side: it knows the event families, checks
// which can run on this kernel and why not, attaches them through package
// probe, and records what they emit into a trace.
package collect
