// Package doctor observes a host while a workload runs and says what limits
// its network throughput: ranked findings, each with its evidence, remedy
// and a way to confirm it.
//
// Observe (observe.go) records the kernel's events by a policy (Families all
// the time; DeepFamilies collect.DefaultSample of each second, or always with Deep),
// polls every socket's tcp_info (poller.go; flows come from the recording
// where it cannot be read), and reads /proc, /sys and the devices around
// the workload: CPU, thread and softnet times, counters, sysctls, offloads,
// qdiscs. RunCommand runs the observed command and reads an iperf3 client's
// result (command.go); FetchPeer and JoinPeer add the evidence of a remote
// end's agent (peer.go); Watch is the agent's long-running observation
// (window.go).
//
// All of it becomes an Evidence (evidence.go, evidence_access.go), the only
// thing the rules read. Each of Rules (rules_*.go by domain; known NIC
// issues in known.go) turns it into findings, and Diagnose ranks them, a
// cause above the symptoms it explains (rules.go). A Report is written as
// text or JSON (finding.go) or as one HTML page (html.go), and read back as
// a run for compare (compare.go).
package doctor
