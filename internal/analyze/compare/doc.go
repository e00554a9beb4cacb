// Package compare says what changed between two runs of one workload: two
// profiles, two traces or two doctor reports, from two kernels, two settings
// or two hosts. It ranks the differences by their share of the change
// (throughput, packet rate, CPU per packet overall and per network-stack
// phase, send limits, drops, retransmissions), lists the settings that
// differ, and names the regression in one line.
package compare
