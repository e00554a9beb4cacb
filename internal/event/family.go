package event

import (
	"fmt"

	"github.com/skbtrace/skbtrace/internal/wire"
)

// familyNames name the event families by their ids (event_family in the
// BPF ABI), as `record -e` and the loss records' summaries call them: the
// one table every package reads, the recorder's included.
var familyNames = [wire.EventFamilyFAMILY_MAX]string{
	wire.EventFamilyFAMILY_TCP_CONN:    "tcp_conn",
	wire.EventFamilyFAMILY_TCP_SENDLIM: "tcp_sendlim",
	wire.EventFamilyFAMILY_TCP_CONG:    "tcp_cong",
	wire.EventFamilyFAMILY_TCP_RETRANS: "tcp_retrans",
	wire.EventFamilyFAMILY_TCP_RTT:     "tcp_rtt",
	wire.EventFamilyFAMILY_TCP_RESET:   "tcp_reset",
	wire.EventFamilyFAMILY_TCP_RCVBUF:  "tcp_rcvbuf",
	wire.EventFamilyFAMILY_SK_LIMIT:    "sk_limit",
	wire.EventFamilyFAMILY_SKB_DROP:    "skb_drop",
	wire.EventFamilyFAMILY_DEV_XMIT:    "dev_xmit",
	wire.EventFamilyFAMILY_DEV_RECV:    "dev_recv",
	wire.EventFamilyFAMILY_NAPI_POLL:   "napi_poll",
	wire.EventFamilyFAMILY_SOFTIRQ:     "softirq",
	wire.EventFamilyFAMILY_QDISC:       "qdisc",
	wire.EventFamilyFAMILY_SOCK_IO:     "sock_io",
}

// FamilyName names a family by its id; an id this build does not know (a
// newer recorder's) is named by its number.
func FamilyName(id uint16) string {
	if int(id) < len(familyNames) && familyNames[id] != "" {
		return familyNames[id]
	}
	return fmt.Sprintf("family%d", id)
}
