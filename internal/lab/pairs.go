package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze/compare"
	"github.com/skbtrace/skbtrace/internal/collect/profiler"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/profile"
	"github.com/skbtrace/skbtrace/internal/version"
)

// ProfilePair is a good and a bad run of one workload that skbtrace compare
// must tell apart: the bad run adds a cost or changes the workload, and
// Check says whether compare named it.
type ProfilePair struct {
	Name  string
	About string
	Load  load.Options
	// Bad prepares the bad run: a setting on the pair, or the workload's options.
	Bad     func(p *Pair) error
	BadLoad func(o *load.Options)
	// Check fails when the comparison misses what the bad run changed.
	Check func(r *compare.Result) error
}

// nftRules is the length of the chain of rules that never match: long
// enough that walking it per packet shows well above the profile's noise.
const nftRules = 400

// ProfilePairs are the lab's pairs for profile and compare.
var ProfilePairs = []ProfilePair{
	{
		Name:  "nft-chain",
		About: fmt.Sprintf("%d nftables rules that never match on the receiver's input hook, against none (1400-byte UDP)", nftRules),
		Load:  load.Options{Mode: load.UDP, Size: 1400},
		Bad:   func(p *Pair) error { return longChain(p) },
		Check: func(r *compare.Result) error {
			if len(r.Phases) == 0 || r.Phases[0].Phase != profile.PhaseNetfilter || r.Phases[0].B <= r.Phases[0].A {
				return fmt.Errorf("netfilter is not the phase that grew most: %v", r.Phases)
			}
			if r.Unit != "packet" {
				return fmt.Errorf("datagrams' cost was counted per %s, not per packet", r.Unit)
			}
			return mentions(r.Headline, "CPU per packet +", "ns in netfilter")
		},
	},
	{
		Name:  "tso-off",
		About: "TSO and GSO off on the sender's veth, against on (TCP bulk)",
		Load:  load.Options{Mode: load.Bulk},
		Bad: func(p *Pair) error {
			_, err := p.Sender.Run("ethtool", "-K", p.SenderDev, "tso", "off", "gso", "off")
			return err
		},
		Check: func(r *compare.Result) error {
			if r.Unit != "byte" {
				return fmt.Errorf("a bulk stream's cost was counted per %s, not per byte", r.Unit)
			}
			if m, _ := r.Metric("CPU per byte"); m.Change < 0.1 {
				return fmt.Errorf("CPU per byte changed only %+.0f %%", 100*m.Change)
			}
			return mentions(r.Headline, "CPU per byte +", "offloads differ", "tx-tcp-segmentation", "on → off")
		},
	},
	{
		Name:    "udp-small",
		About:   "64-byte UDP datagrams against 1400-byte ones",
		Load:    load.Options{Mode: load.UDP, Size: 1400},
		BadLoad: func(o *load.Options) { o.Size = 64 },
		Check: func(r *compare.Result) error {
			// Both runs are bound by the cost per packet (the generator's
			// syscalls), so the packet rate stays and the throughput falls.
			if m, _ := r.Metric("throughput"); m.Change > -0.5 {
				return fmt.Errorf("64-byte datagrams did not cut the throughput (%+.0f %%)", 100*m.Change)
			}
			return mentions(r.Headline, "packets of", "packet rate", "CPU per packet")
		},
	},
}

func mentions(headline string, want ...string) error {
	for _, w := range want {
		if !strings.Contains(headline, w) {
			return fmt.Errorf("the headline does not say %q: %s", w, headline)
		}
	}
	return nil
}

// longChain adds the chain of never-matching rules in one nft transaction.
func longChain(p *Pair) error {
	var b strings.Builder
	fmt.Fprintf(&b, "add table inet %s\nadd chain inet %s c { type filter hook input priority 0; }\n", netTable, netTable)
	for i := range nftRules {
		// TEST-NET-3 sources: no lab packet comes from there.
		fmt.Fprintf(&b, "add rule inet %s c ip saddr 203.0.113.%d udp dport %d counter drop\n", netTable, i%250+1, 10000+i)
	}
	f, err := os.CreateTemp("", "skbtrace-nft-*.nft")
	if err != nil {
		return fmt.Errorf("writing the nft chain: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("writing the nft chain: %w", err)
	}
	f.Close()
	_, err = p.Receiver.Run("nft", "-f", f.Name())
	return err
}

// PairResult is one pair's two profiles and their comparison.
type PairResult struct {
	Pair       *ProfilePair
	Good, Bad  string // the pprof files
	Comparison *compare.Result
	// Err is what Check found missing (nil: compare named the change).
	Err error
}

// RunPair profiles the good and the bad run of a pair at hz for d each,
// writes both profiles to dir and compares them. Everything the pair
// created is removed on every path.
func RunPair(ctx context.Context, pp *ProfilePair, hz int, d time.Duration, dir string) (*PairResult, error) {
	p, done, err := setUp(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer done(false)
	o := pp.Load
	o.Duration = d
	o.Addr = fmt.Sprintf("%s:%d", ReceiverAddr.Addr(), Port)
	o.DialNetns = p.Sender.Name
	o.Defaults()
	res := &PairResult{Pair: pp, Good: filepath.Join(dir, pp.Name+"-good.pb.gz"), Bad: filepath.Join(dir, pp.Name+"-bad.pb.gz")}
	if err := profileRun(ctx, o, hz, res.Good); err != nil {
		return nil, fmt.Errorf("%s, good run: %w", pp.Name, err)
	}
	if pp.Bad != nil {
		if err := pp.Bad(p); err != nil {
			return nil, fmt.Errorf("%s: preparing the bad run: %w", pp.Name, err)
		}
	}
	if pp.BadLoad != nil {
		pp.BadLoad(&o)
	}
	if err := profileRun(ctx, o, hz, res.Bad); err != nil {
		return nil, fmt.Errorf("%s, bad run: %w", pp.Name, err)
	}
	a, err := loadPprof(res.Good)
	if err != nil {
		return nil, err
	}
	b, err := loadPprof(res.Bad)
	if err != nil {
		return nil, err
	}
	if res.Comparison, err = compare.Compare(a, b); err != nil {
		return nil, err
	}
	res.Err = pp.Check(res.Comparison)
	return res, nil
}

func profileRun(ctx context.Context, o load.Options, hz int, path string) error {
	var loadErr error
	prof, err := profiler.Collect(ctx, profiler.Options{Hz: hz, Version: version.Version, Workload: func(ctx context.Context) error {
		_, loadErr = load.Run(ctx, o, nil)
		return loadErr
	}})
	if err != nil {
		return err
	}
	if !prof.Meta.Traffic.Counted || prof.Meta.Traffic.Packets() == 0 {
		return errors.New("the profile counted no packets")
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := prof.WritePprof(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

func loadPprof(path string) (*compare.Run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	return compare.Load(path, f, nil) // a profile the pair wrote
}
