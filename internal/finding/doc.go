// Package finding is the verdict every analyzer gives (doctor, pcap,
// profile, compare): an id from docs/findings.md, a severity, the evidence
// with its numbers, the explanation, the remedy and the throughput at stake.
// It sits below them all so they share one format.
package finding
