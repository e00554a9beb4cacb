// Package load generates traffic for the lab and for users: bulk TCP,
// request/response TCP and UDP at a rate, with per-second and total results.
// A server counts what arrives; for UDP, the client asks it over a TCP
// control connection on the same port how much arrived, so loss is measured
// end to end.
package load
