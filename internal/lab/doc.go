// Package lab builds reproducible network topologies in network namespaces:
// two namespaces (sender and receiver) joined by a veth pair, everything
// named with a per-run suffix and removed by Close on every exit path.
package lab
