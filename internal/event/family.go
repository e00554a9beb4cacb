package event

import (
	"fmt"

	"github.com/skbtrace/skbtrace/internal/probe"
)

// familyNames name the event families by their ids (event_family in the
// BPF ABI), as `record -e` and the loss records' summaries call them: the
// one table every package reads, the recorder's included.
var familyNames = [probe.SkbtraceEventFamilyFAMILY_MAX]string{
	probe.SkbtraceEventFamilyFAMILY_TCP_CONN:    "tcp_conn",
	probe.SkbtraceEventFamilyFAMILY_TCP_SENDLIM: "tcp_sendlim",
	probe.SkbtraceEventFamilyFAMILY_TCP_CONG:    "tcp_cong",
	probe.SkbtraceEventFamilyFAMILY_TCP_RETRANS: "tcp_retrans",
	probe.SkbtraceEventFamilyFAMILY_TCP_RTT:     "tcp_rtt",
	probe.SkbtraceEventFamilyFAMILY_TCP_RESET:   "tcp_reset",
	probe.SkbtraceEventFamilyFAMILY_TCP_RCVBUF:  "tcp_rcvbuf",
	probe.SkbtraceEventFamilyFAMILY_SK_LIMIT:    "sk_limit",
	probe.SkbtraceEventFamilyFAMILY_SKB_DROP:    "skb_drop",
	probe.SkbtraceEventFamilyFAMILY_DEV_XMIT:    "dev_xmit",
	probe.SkbtraceEventFamilyFAMILY_DEV_RECV:    "dev_recv",
	probe.SkbtraceEventFamilyFAMILY_NAPI_POLL:   "napi_poll",
	probe.SkbtraceEventFamilyFAMILY_SOFTIRQ:     "softirq",
	probe.SkbtraceEventFamilyFAMILY_QDISC:       "qdisc",
	probe.SkbtraceEventFamilyFAMILY_SOCK_IO:     "sock_io",
}

// FamilyName names a family by its id; an id this build does not know (a
// newer recorder's) is named by its number.
func FamilyName(id uint16) string {
	if int(id) < len(familyNames) && familyNames[id] != "" {
		return familyNames[id]
	}
	return fmt.Sprintf("family%d", id)
}
