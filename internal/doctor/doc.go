// Package doctor judges: evidence in, findings out, no I/O. An Evidence
// (evidence.go, evidence_access.go) is everything measured over one
// observation, and the only thing the rules read; JoinPeer adds a remote
// end's. Each of Rules (rules_*.go by domain: sender limits, loss, offload
// and NIC, MTU and packet size, path and queues, CPU; known NIC issues in
// known.go) turns it into findings, and Diagnose ranks them, a cause above
// the symptoms it explains (rules.go). A Report is written as text or JSON
// (finding.go) or as one HTML page (html.go), and read back as a run for
// compare (compare.go).
//
// Observing a host to gather the evidence is package doctor/observe's.
package doctor
