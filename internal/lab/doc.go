// Package lab builds reproducible network faults and proves each diagnosis
// end to end. A scenario (scenarios.go, variants*.go, noise*.go, nic.go)
// builds a topology in network namespaces (topology.go: a sender and a
// receiver joined by a veth pair, or by two real NICs given with --wire),
// runs a workload in a good and a fault run (workload.go, scripts.go),
// and checks the doctor's top finding against the fault it made (catalog.go,
// peer.go with the receiver's agent); pairs.go profiles a good and a bad
// run for compare; story.go is `lab demo`. XDP and tc programs some faults
// need are generated from bpf/lab (xdp.go, rxcsum.go). Everything is named
// with a per-run suffix and removed by Close on every exit path, devices
// handed back with their settings restored.
package lab
