package analyze

import "github.com/skbtrace/skbtrace/internal/event"

// DefaultWindow is how many events may wait for a missing sequence number
// before it is declared lost. Events are queued in the ring buffer in nearly
// sequence order (two CPUs race only between taking a number and reserving
// space), so a small window suffices.
const DefaultWindow = 1 << 14

// Orderer restores sequence order and counts gaps. Events arriving in order
// pass straight through; only out-of-order ones are copied.
type Orderer struct {
	next    uint64
	window  int
	pending []event.Event // min-heap on Seq
	// Gaps counts runs of missing sequence numbers, Missing the numbers.
	Gaps, Missing uint64
	// Late counts events that arrived after their number was declared lost;
	// they are emitted out of order.
	Late uint64
}

// NewOrderer expects the first sequence number to be 0, as every recording starts there.
func NewOrderer(window int) *Orderer {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Orderer{window: window}
}

// Push takes one event and emits every event that is now in order.
func (o *Orderer) Push(ev *event.Event, emit func(*event.Event) error) error {
	switch {
	case ev.Seq == o.next && len(o.pending) == 0:
		o.next++
		return emit(ev)
	case ev.Seq < o.next:
		o.Late++
		return emit(ev)
	}
	o.push(*ev)
	for len(o.pending) > 0 {
		top := &o.pending[0]
		if top.Seq != o.next {
			if len(o.pending) <= o.window {
				return nil
			}
			o.Gaps++
			o.Missing += top.Seq - o.next
			o.next = top.Seq
		}
		e := o.pop()
		o.next++
		if err := emit(&e); err != nil {
			return err
		}
	}
	return nil
}

// Resume says the numbers below first that have not come were left out on
// purpose (a rotated file's predecessor, the time between flight-recorder
// windows): what waits below it goes out in order, and no gap is counted.
func (o *Orderer) Resume(first uint64, emit func(*event.Event) error) error {
	for len(o.pending) > 0 && o.pending[0].Seq < first {
		e := o.pop()
		o.next = e.Seq + 1
		if err := emit(&e); err != nil {
			return err
		}
	}
	o.next = max(o.next, first)
	if len(o.pending) > 0 && o.pending[0].Seq == o.next {
		return o.drain(emit)
	}
	return nil
}

// drain emits the waiting events that are in order.
func (o *Orderer) drain(emit func(*event.Event) error) error {
	for len(o.pending) > 0 && o.pending[0].Seq == o.next {
		e := o.pop()
		o.next++
		if err := emit(&e); err != nil {
			return err
		}
	}
	return nil
}

// Flush emits everything still waiting; numbers never seen count as missing.
// Numbers after the last event seen are only known missing with the end
// record's NextSeq, given as end (0 when the recording did not end cleanly).
func (o *Orderer) Flush(end uint64, emit func(*event.Event) error) error {
	for len(o.pending) > 0 {
		e := o.pop()
		if e.Seq > o.next {
			o.Gaps++
			o.Missing += e.Seq - o.next
		}
		o.next = e.Seq + 1
		if err := emit(&e); err != nil {
			return err
		}
	}
	if end > o.next {
		o.Gaps++
		o.Missing += end - o.next
		o.next = end
	}
	return nil
}

func (o *Orderer) push(e event.Event) {
	o.pending = append(o.pending, e)
	i := len(o.pending) - 1
	for i > 0 {
		p := (i - 1) / 2
		if o.pending[p].Seq <= o.pending[i].Seq {
			break
		}
		o.pending[p], o.pending[i] = o.pending[i], o.pending[p]
		i = p
	}
}

func (o *Orderer) pop() event.Event {
	h := o.pending
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].Seq < h[m].Seq {
			m = l
		}
		if r < len(h) && h[r].Seq < h[m].Seq {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	o.pending = h
	return top
}
