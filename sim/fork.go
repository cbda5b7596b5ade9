package sim

import (
	"container/list"
	"errors"
	"fmt"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// forkable is a Source whose position can be copied: the copy hands out
// the same requests from the same point, independently.
type forkable interface {
	fork() Source
}

func (s *sliceSource) fork() Source { c := *s; return &c }

// Fork copies a run paused by Advance into a new run that records to rec
// and is driven by ctrl, and shares no state with s: both can go on, and
// s can be forked again. The copy's core is the paused core's, with ctrl
// in place of its controller.
//
// The copy continues exactly as a run of ctrl from the start would when
// ctrl had made every decision s's controller made before the pause, and
// asked for its ticks at the same points, wanting only the next one it
// asks for to differ: a core.Scheduled whose steps before the pause are
// s's schedule's (core.Scheduled.Follow) is such a controller. The tick
// s has pending is moved to the one ctrl asks for, at the point in the
// event order where ctrl would have asked for it. The hindsight search
// (package sweep) replays a schedule that differs from one it played
// from the first window that differs, not from the start.
//
// Fork needs a run started by Advance and not ended, a source that can be
// copied (the requests of New are) and an open admission gate (its
// deadline ticks are not moved).
func (s *Sim) Fork(rec event.Recorder, ctrl core.Controller) (*Sim, error) {
	if !s.started || s.st == nil || s.err != nil {
		return nil, errors.New("sim: fork: expected a run paused by Advance, not ended")
	}
	src, ok := s.src.(forkable)
	if !ok {
		return nil, fmt.Errorf("sim: fork: source %T cannot be copied: expected the requests of New", s.src)
	}
	if s.cfg.Admission.Mode != core.AdmitOpen {
		return nil, fmt.Errorf("sim: fork: admission %v: expected open", s.cfg.Admission.Mode)
	}
	if s.dueHead < len(s.due) {
		return nil, errors.New("sim: fork: events due now: expected a run paused by Advance")
	}
	if rec == nil {
		rec = event.Discard
	}
	c := *s
	c.core = s.core.Fork(ctrl)
	c.rec = rec
	c.src = src.fork()
	c.st = newRing(len(s.st))
	copy(c.st, s.st)
	c.eng = make([]engine, len(s.eng))
	for i := range s.eng {
		c.eng[i] = s.eng[i].clone()
	}
	c.heap = slices.Clone(s.heap)
	c.refusedCordon = slices.Clone(s.refusedCordon)
	c.due = nil
	c.dueHead = 0
	if err := c.retick(c.core.NextTick()); err != nil {
		return nil, err
	}
	return &c, nil
}

// Doomed counts the requests in flight in a run paused at t (Advance)
// that cannot qualify under slo however the run goes on: no first token
// and sent more than slo.TTFT before t; a first token, and more time
// since it than slo.TPOT for each token still to come after it (TPOT is
// a whole number of nanoseconds, its mean rounded down); or an answer cut
// at its cap. The hindsight search compares runs at a pause with it, so
// that a backlog counts before its requests end.
func (s *Sim) Doomed(t event.Time, slo event.SLO) int {
	n := 0
	s.eachDoomed(t, slo, func(int32) { n++ })
	return n
}

// eachDoomed calls f with the index of each request Doomed counts.
func (s *Sim) eachDoomed(t event.Time, slo event.SLO, f func(i int32)) {
	for i := s.base; i < s.top; i++ {
		st := &s.st[i&s.mask]
		switch {
		case st.ended:
		case st.capped:
			f(i)
		case st.firstAt == 0:
			if t-st.at > slo.TTFT {
				f(i)
			}
		case st.want >= 2 && t-st.firstAt >= (slo.TPOT+1)*event.Time(st.want-1):
			f(i)
		}
	}
}

// retick makes the pending tick the one at want, as if want had been
// asked for when the pending tick was (see Fork).
func (s *Sim) retick(want event.Time) error {
	if want == s.tickAt {
		return nil
	}
	if want <= s.now {
		return fmt.Errorf("sim: fork: the controller asks for a tick at %v, at or before the pause at %v: expected its decisions before the pause to be the run's", want, s.now)
	}
	// The heap's events, the pending tick found among them; the heap is
	// rebuilt below (events are totally ordered by (at, seq), so any heap
	// of the same events pops them in the same order).
	evs := slices.Clone(s.heap[min(1, len(s.heap)):])
	at := -1
	if s.tickAt != event.Never {
		at = slices.IndexFunc(evs, func(e ev) bool { return e.kind == evTick && e.gen == s.tickGen })
		if at < 0 {
			return errors.New("sim: fork: the pending tick is not in the heap")
		}
	}
	switch {
	case at >= 0 && want != event.Never:
		// Asked for at the same point, for another time.
		evs[at].at = want
	case at >= 0:
		// Never pushed: its seq stays unused (only the order of seqs
		// matters), and its generation is the next push's.
		evs = slices.Delete(evs, at, at+1)
		s.tickGen--
	default:
		// Pushed when first asked for: at seq tickAskSeq+1, which every
		// event pushed since then follows.
		if !s.tickAsked {
			return errors.New("sim: fork: no tick was asked for since the last one fired")
		}
		for i := range evs {
			if evs[i].seq > s.tickAskSeq {
				evs[i].seq++
			}
		}
		s.seq++
		s.tickGen++
		evs = append(evs, ev{at: want, seq: s.tickAskSeq + 1, kind: evTick, gen: s.tickGen})
	}
	s.tickAt = want
	s.heap = s.heap[:0]
	for _, e := range evs {
		s.heap.push(e)
	}
	return nil
}

// clone copies an engine, sharing nothing that changes.
func (e *engine) clone() engine {
	c := *e
	c.prefillQ = slices.Clone(e.prefillQ)
	c.waiting = slices.Clone(e.waiting)
	c.running.items = slices.Clone(e.running.items)
	c.preempted = slices.Clone(e.preempted)
	c.recomp = slices.Clone(e.recomp)
	c.rchunks = slices.Clone(e.rchunks)
	c.chunks = slices.Clone(e.chunks)
	if e.cache != nil {
		c.cache = e.cache.clone()
	}
	return c
}

// clone copies a prefix cache in its recency order.
func (p *prefixCache) clone() *prefixCache {
	c := *p
	c.lru = list.New()
	c.index = make(map[int64]*list.Element, len(p.index))
	for el := p.lru.Front(); el != nil; el = el.Next() {
		en := *el.Value.(*cacheEntry)
		c.index[en.group] = c.lru.PushBack(&en)
	}
	return &c
}
