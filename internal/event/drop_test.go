package event

import "testing"

func TestRoutineDrops(t *testing.T) {
	for _, tc := range []struct {
		reason, location string
		want             bool
	}{
		{"SOCKET_CLOSE", "tcp_close+0x10", true},
		{"NOT_SPECIFIED", "tcp_v4_rcv+0x9a4", true},
		// vmxnet3 frees every completed transmission as a drop (6.12 guest).
		{"NOT_SPECIFIED", "vmxnet3_tq_tx_complete.isra.0+0x17f", true},
		{"NO_REASON", "e1000_clean_tx_irq+0x1c2", true},
		{"NETFILTER_DROP", "nf_hook_slow+0x91", false},
		{"NOT_SPECIFIED", "ip_rcv_core+0x1a0", false},
		{"NO_REASON", "nf_hook_slow+0x91", false},
		// A reasoned drop in a completion path is no routine free.
		{"FULL_RING", "mydrv_clean_tx_irq+0x40", false},
	} {
		if got := RoutineDrop(tc.reason, tc.location); got != tc.want {
			t.Errorf("RoutineDrop(%s, %s) = %v, want %v", tc.reason, tc.location, got, tc.want)
		}
	}
}
