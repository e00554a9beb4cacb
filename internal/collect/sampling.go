package collect

import (
	"slices"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
)

// DefaultSample is the share of each interval the per-packet families stay
// attached when a recording's families are the default set (record's, the
// doctor's, the agent's): it keeps a multi-gigabit stream's cost under 5 %
// (make bench).
const DefaultSample = 0.05

// Sampled says which families the recording attaches only part of each
// interval and for what share of it: their counts cover that share of the
// time, and scale by its inverse to the whole.
func (r *Recording) Sampled() (families []string, share float64) {
	if len(r.sampledFamilies) == 0 {
		return nil, 1
	}
	return slices.Clone(r.sampledFamilies), r.opts.Sample
}

// planSampling picks the hooks sampling detaches: the per-packet families'
// own. A hook a family that always runs shares (sock_send_length, with
// tcp_sendlim) stays attached, and the family's part of it is paused
// instead. A family that follows things to their end (Family.UnderWay)
// lingers: paused at a window's end, detached once nothing is under way.
func (r *Recording) planSampling() {
	alwaysOn := map[event.Hook]bool{}
	for _, run := range r.Running {
		if !run.Family.PerPacket {
			for _, h := range run.Hooks {
				alwaysOn[h] = true
			}
		}
	}
	for _, run := range r.Running {
		if !run.Family.PerPacket || !reattachable(run.Hooks) {
			continue
		}
		var own []event.Hook
		shared := false
		for _, h := range run.Hooks {
			if alwaysOn[h] {
				shared = true
			} else {
				own = append(own, h)
			}
		}
		if shared && run.Family.Paused == "" {
			continue // it cannot stop, so it counts exactly
		}
		if shared || len(run.Family.UnderWay) > 0 {
			r.paused = append(r.paused, run.Family.Paused)
		}
		if f := run.Family; len(f.UnderWay) > 0 {
			r.lingerers = append(r.lingerers, &lingerer{hooks: own, underWay: f.UnderWay, fresh: f.Fresh, freshFor: f.FreshFor, attached: true})
		} else {
			r.sampled = append(r.sampled, own...)
		}
		r.sampledFamilies = append(r.sampledFamilies, run.Family.Name)
	}
}

// reattachable says whether sampling may detach and attach the hooks again:
// on older kernels (5.10 measured) an fentry or fexit program attaches once
// only (ENOENT after), so families on kernel functions stay attached and
// count exactly.
func reattachable(hooks []event.Hook) bool {
	for _, h := range hooks {
		if h.Kind == event.FEntry || h.Kind == event.FExit {
			return false
		}
	}
	return true
}

// baselineSampled takes what the sampled families counted before the
// recording began as the start of their first window: their programs were
// attached while later families loaded (up to a second before), and those
// counts would stand for a 50 ms window.
func (st *recorderState) baselineSampled() error {
	d := st.drainer
	if d == nil || st.sampledFamilies == nil {
		return nil
	}
	for _, f := range st.opts.Families {
		if drain := drains[f.ID]; drain != nil && slices.Contains(st.sampledFamilies, f.Name) {
			if err := drain(d); err != nil {
				return err
			}
		}
	}
	d.pending = d.pending[:0]
	return nil
}

// sample flips the per-packet hooks: attached for Sample of each interval.
// A drain at each flip makes their events cover exactly the attached
// windows (drained at attach, they have counted nothing since the last).
func (st *recorderState) sample(now time.Time) error {
	if st.sampledFamilies == nil || now.Before(st.nextFlip) {
		return nil
	}
	if st.detached {
		if err := st.drain(); err != nil {
			return err
		}
		if err := st.sess.ForgetSoftirqStarts(); err != nil {
			return err
		}
		// Hooks count from the moment each attaches, and attaching takes
		// milliseconds here, tens of them on an emulated CPU: the window
		// is taken to begin halfway through attaching and to end halfway
		// through detaching, the counts read only once every hook is off,
		// and it lasts its full length after the last hook is on. (Timed
		// from before attaching, it scaled a QEMU guest's dev_xmit
		// 1,500-fold; begun after attaching, with counts read while hooks
		// still ran, dev_recv 2.4-fold; now within 16 % of the NIC's
		// counters there.)
		start := host.BootNow()
		if err := st.sess.Attach(st.sampled); err != nil {
			return err
		}
		for _, l := range st.lingerers {
			if err := st.sess.Attach(l.hooks); err != nil {
				return err
			}
			l.attached = true
		}
		if err := st.sess.SetPaused(st.paused, false); err != nil {
			return err
		}
		if st.drainer != nil {
			st.drainer.begin = start + (host.BootNow()-start)/2
		}
		st.detached, st.nextFlip = false, time.Now().Add(time.Duration(float64(st.opts.Interval)*st.opts.Sample))
	} else {
		start := host.BootNow()
		st.sess.DetachHooks(st.sampled)
		if err := st.sess.SetPaused(st.paused, true); err != nil {
			return err
		}
		if st.drainer != nil {
			if err := st.drainAt(start + (host.BootNow()-start)/2); err != nil {
				return err
			}
		}
		st.detached, st.nextFlip = true, now.Add(time.Duration(float64(st.opts.Interval)*(1-st.opts.Sample)))
	}
	st.lastDrain = now
	return nil
}

// lingerer is a sampled family that follows what it began in a window to
// its end (Family.UnderWay): its hooks stay attached after the window,
// paused, until its counts of what is under way read zero and its last
// beginning is stale.
type lingerer struct {
	hooks    []event.Hook
	underWay []string
	fresh    string
	freshFor time.Duration
	attached bool
}

// lingerPoll is how often a lingering family's counts are read: its hooks
// stay that much past the end of what they follow.
const lingerPoll = 10 * time.Millisecond

// lingering says whether a family's hooks linger past their window.
func (st *recorderState) lingering() bool {
	return st.detached && slices.ContainsFunc(st.lingerers, func(l *lingerer) bool { return l.attached })
}

// linger detaches, between windows, the lingering families whose
// followed things have all ended.
func (st *recorderState) linger() error {
	if !st.detached {
		return nil
	}
	for _, l := range st.lingerers {
		if !l.attached {
			continue
		}
		busy, err := st.sess.UnderWay(l.underWay, l.fresh, l.freshFor)
		if err != nil {
			return err
		}
		if !busy {
			st.sess.DetachHooks(l.hooks)
			l.attached = false
		}
	}
	return nil
}
