package event

import "strings"

// routineDropReasons are drop reasons that follow from normal operation or
// from another problem (a reset, a retransmission already received).
var routineDropReasons = map[string]bool{
	"SOCKET_CLOSE": true, "TCP_OLD_DATA": true, "TCP_OLD_SEQUENCE": true, "TCP_OLD_ACK": true, "TCP_TOO_OLD_ACK": true,
	"TCP_CLOSE": true, "NO_SOCKET": true, "TCP_OFOMERGE": true, "TCP_RESET": true, "QUEUE_PURGE": true, "TCP_INVALID_SEQUENCE": true,
}

// RoutineDrop says whether a drop, given its reason's kernel name and its
// location as symbol+offset, follows from normal operation. Beside the
// routine reasons, a segment that a TIME_WAIT socket absorbs (the last ACK
// or FIN of a closed connection) leaves tcp_v4_rcv or tcp_v6_rcv without a
// reason of its own: every other drop there has one since 5.17.
func RoutineDrop(reason, location string) bool {
	return routineDropReasons[reason] || reason == "NOT_SPECIFIED" &&
		(strings.HasPrefix(location, "tcp_v4_rcv+") || strings.HasPrefix(location, "tcp_v6_rcv+"))
}
