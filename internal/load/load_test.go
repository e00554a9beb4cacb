package load

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func startServer(t *testing.T) string {
	t.Helper()
	srv, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serving: %v", err)
		}
	})
	return srv.Addr().String()
}

func TestBulkReportsIntervalsAndTotal(t *testing.T) {
	addr := startServer(t)
	var seen []Interval
	res, err := Run(context.Background(), Options{Addr: addr, Duration: 600 * time.Millisecond, Interval: 200 * time.Millisecond, Streams: 2},
		func(iv Interval) { seen = append(seen, iv) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes == 0 || res.Bps <= 0 || len(res.Intervals) < 3 || len(seen) < 3 {
		t.Fatalf("result %+v, %d progress calls", res, len(seen))
	}
	var sum uint64
	for _, iv := range res.Intervals {
		sum += iv.Bytes
	}
	if sum != res.Bytes {
		t.Fatalf("intervals add up to %d bytes, total says %d", sum, res.Bytes)
	}
}

func TestRequestResponseCountsTransactions(t *testing.T) {
	addr := startServer(t)
	res, err := Run(context.Background(), Options{Mode: RR, Addr: addr, Duration: 300 * time.Millisecond, NoDelay: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops < 10 || res.AvgRTTus <= 0 || res.Bytes != res.Ops*100 {
		t.Fatalf("result %+v", res)
	}
}

func TestUDPRateAndLoss(t *testing.T) {
	addr := startServer(t)
	const rate = 20e6
	res, err := Run(context.Background(), Options{Mode: UDP, Addr: addr, Duration: time.Second, RateBps: rate, Streams: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(res.Bps-rate) > 0.05*rate {
		t.Fatalf("sent %.0f bit/s, asked for %.0f", res.Bps, rate)
	}
	if res.Received == 0 || res.Received+res.Lost != res.Ops {
		t.Fatalf("sent %d, received %d, lost %d", res.Ops, res.Received, res.Lost)
	}
}

func TestOptionsCheck(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Mode: "tcp", Addr: "x:1"}, "unknown mode"},
		{Options{Addr: ""}, "no server address"},
		{Options{Mode: UDP, Addr: "x:1", Size: 70000}, "larger than 65507"},
		{Options{Addr: "x:1", Streams: 500}, "streams"},
		{Options{Mode: RR, Addr: "x:1", Size: 1, Writes: 2}, "do not fit"},
	} {
		c.o.Defaults()
		if err := c.o.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}

func TestConnectionRefusedIsAnError(t *testing.T) {
	srv, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	srv.tcp.Close()
	srv.udp.Close()
	if _, err := Run(context.Background(), Options{Addr: addr, Duration: 100 * time.Millisecond}, nil); err == nil ||
		!strings.Contains(err.Error(), "connecting to tcp") {
		t.Fatalf("err %v", err)
	}
}
