package lab

// Noise are healthy runs with the background a real host has: fresh
// interfaces (IPv6 neighbour discovery, MLD, ARP), idle and keepalive
// connections, connection churn, a second slow flow, ping, small UDP
// requests. The doctor must give none of them a warning.
var Noise = []*Scenario{}
