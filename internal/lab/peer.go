package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/skbtrace/skbtrace/internal/agent"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/doctor/observe"
)

// AgentPort is where the lab's agent listens in the receiver's namespace.
const AgentPort = 9464

// labAgent is an agent serving from the receiver's namespace, as one would
// on the receiving host.
type labAgent struct {
	p      *Pair
	url    string
	cancel context.CancelFunc
	done   chan struct{}
}

func startLabAgent(ctx context.Context, p *Pair) (*labAgent, error) {
	addr := net.JoinHostPort(ReceiverAddr.Addr().String(), strconv.Itoa(AgentPort))
	var ln net.Listener
	if err := p.Receiver.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		return nil, fmt.Errorf("starting the receiver's agent: %w", err)
	}
	a, err := agent.Start(agent.Options{Netns: []string{p.Receiver.Name}})
	if err != nil {
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &labAgent{p: p, url: "http://" + addr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		go a.Serve(ctx, ln)
		a.Run(ctx)
	}()
	// Two samples make a window.
	time.Sleep(2 * time.Second)
	return l, nil
}

// join asks the agent from the sender's namespace, as the doctor on the
// sending host would, and joins its evidence.
func (l *labAgent) join(ctx context.Context, ev *doctor.Evidence, since time.Time) {
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = l.p.Sender.Do(func() error {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dial}}
	host, remote, err := observe.FetchPeer(ctx, client, l.url, "", since)
	if err != nil {
		ev.Notes = append(ev.Notes, "peer not joined: "+err.Error())
		return
	}
	ev.JoinPeer(l.url, "peer", host, remote)
}

func (l *labAgent) stop() {
	l.cancel()
	<-l.done
}
