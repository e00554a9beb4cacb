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
//
// So is a driver's free of an skb whose transmission completed: a driver
// that frees sent skbs with dev_kfree_skb_any() rather than consuming them
// (vmxnet3's vmxnet3_tq_tx_complete) reports each as a drop without a
// reason (NO_REASON before 5.17), thousands a second on a healthy wire.
func RoutineDrop(reason, location string) bool {
	if routineDropReasons[reason] {
		return true
	}
	if reason != "NOT_SPECIFIED" && reason != "NO_REASON" {
		return false
	}
	if reason == "NOT_SPECIFIED" && (strings.HasPrefix(location, "tcp_v4_rcv+") || strings.HasPrefix(location, "tcp_v6_rcv+")) {
		return true
	}
	return txCompletion(location)
}

// txCompletionNames are parts of the names drivers give the functions that
// reclaim transmitted skbs (e1000's e1000_clean_tx_irq, ixgbe's
// ixgbe_clean_tx_irq, virtio-net's free_old_xmit, bnxt's bnxt_tx_int,
// mlx5's mlx5e_poll_tx_cq, vmxnet3's vmxnet3_tq_tx_complete).
var txCompletionNames = []string{"tx_complete", "clean_tx", "tx_clean", "tx_irq", "free_old_xmit", "tx_int", "poll_tx"}

// txCompletion says whether a location (symbol+offset) is in a driver's
// transmit completion.
func txCompletion(location string) bool {
	fn, _, _ := strings.Cut(location, "+")
	for _, n := range txCompletionNames {
		if strings.Contains(fn, n) {
			return true
		}
	}
	return false
}
