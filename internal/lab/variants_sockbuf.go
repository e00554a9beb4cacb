package lab

import (
	"fmt"

	"github.com/skbtrace/skbtrace/internal/load"
)

func init() { Noise = append(Noise, sockbufNoise...) }

// sockbufNoise are the healthy controls of sndbuf-limited's remedies: a
// namespace's tcp_wmem is a limit only for the sockets it sizes.
var sockbufNoise = []*Scenario{
	{
		Name:      "noise-wmem-small-app-sndbuf",
		Mechanism: "a small tcp_wmem that does not limit: the sending application sets its own send buffer",
		Fault: "net.ipv4.tcp_wmem = 4096 8192 8192 in the sender's namespace, and the sender forces SO_SNDBUF to 2 MB " +
			"(4 MB with the kernel's doubling, the default tcp_wmem maximum): the sysctl sizes no socket (control: both defaults)",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		Inject:    func(p *Pair) error { return sysctl(p.Sender, "net.ipv4.tcp_wmem", "4096 8192 8192") },
		FaultLoad: func(o *load.Options) { o.SndBuf, o.ForceBufs = 2<<20, true },
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			share := f.limitShare("sndbuf")
			return fmt.Sprintf("tcp_sendlim [sndbuf] %.0f %% of the sender's time under tcp_wmem 4096 8192 8192", share*100), share < 0.3
		}),
	},
}
