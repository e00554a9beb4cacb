// Package observe gathers the doctor's evidence while a workload runs.
// Observe (observe.go) records the kernel's events by a policy (Families all
// the time; DeepFamilies collect.DefaultSample of each second, or always
// with Deep), polls every socket's tcp_info (poller.go; flows come from the
// recording where it cannot be read), and reads /proc, /sys and the devices
// around the workload: CPU, thread and softnet times, counters, sysctls,
// offloads, qdiscs. RunCommand runs the observed command and reads an
// iperf3 client's result (command.go); FetchPeer asks a remote end's agent
// for its evidence (peer.go); Watch is the agent's long-running observation
// (window.go). Judging the evidence is package doctor's.
package observe
