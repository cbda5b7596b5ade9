package event

import (
	"fmt"
	"maps"
	"slices"
)

// StreamFold folds a run's records into the rows Fold would build, but
// keeps only the requests in flight: when a request ends, its row is
// final, StreamFold hands it to End and forgets it. A run's outcomes are
// scored as its requests end, and the memory held follows the requests
// in flight, not the requests offered.
//
// Request IDs are expected dense (1..N) and to arrive in about their
// order, as both drivers assign them: the rows held are a ring over the
// requests from the oldest still open to the newest seen, grown by
// doubling. It checks the life cycle as Fold does (Err).
type StreamFold struct {
	// End, when set, receives each request's row when its terminal record
	// is folded. The row is reused after End returns.
	End func(*Row)

	ring  []foldRow // request i is ring[i&mask] while base <= i < top
	mask  int
	base  int // requests (0-based) below base have ended: their rows are gone
	top   int // 1 + the highest request seen (0-based)
	ended int
	ct    classTable
	refs  map[int]string // reference texts of requests in flight, when any
	out   Row
	err   error
}

// Record folds one record.
func (f *StreamFold) Record(rec *Record) {
	if rec.Req <= 0 {
		return
	}
	i := int(rec.Req - 1)
	if i < f.base {
		f.fail(fmt.Errorf("request %d: %s at %v after it ended", rec.Req, rec.Kind, rec.At))
		return
	}
	if i >= f.top {
		f.extend(i + 1)
	}
	r := &f.ring[i&f.mask]
	applied, err := r.apply(rec, &f.ct)
	if err != nil {
		f.fail(err)
	}
	if !applied {
		return
	}
	if rec.Kind == KindArrival && rec.Text != "" {
		if f.refs == nil {
			f.refs = map[int]string{}
		}
		f.refs[i] = rec.Text
	}
	if r.terminal == KindNone {
		return
	}
	f.ended++
	if f.End != nil {
		r.build(rec.Req, &f.ct, &f.out)
		if ref, ok := f.refs[i]; ok {
			f.out.Reference = ref
		}
		if rec.Kind == KindFinish {
			f.out.Response = rec.Text
		}
		f.End(&f.out)
	}
	delete(f.refs, i)
	for f.base < f.top && f.ring[f.base&f.mask].terminal != KindNone {
		f.base++
	}
}

// extend makes room for the requests below top, growing the ring when
// they do not fit, and starts their rows.
func (f *StreamFold) extend(top int) {
	if need := top - f.base; need > len(f.ring) {
		n := max(len(f.ring), 64)
		for n < need {
			n *= 2
		}
		grown := make([]foldRow, n)
		for j := f.base; j < f.top; j++ {
			grown[j&(n-1)] = f.ring[j&f.mask]
		}
		f.ring, f.mask = grown, n-1
	}
	for j := f.top; j < top; j++ {
		f.ring[j&f.mask] = newFoldRow()
	}
	f.top = top
}

func (f *StreamFold) fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

// Len is the number of requests folded so far: the highest request ID
// seen, as Fold.Len.
func (f *StreamFold) Len() int { return f.top }

// Ended is the number of requests that have ended.
func (f *StreamFold) Ended() int { return f.ended }

// Held is how many rows the fold has room for now: a power of two at
// least the requests from the oldest still open to the newest seen.
func (f *StreamFold) Held() int { return len(f.ring) }

// Err returns the first life-cycle violation seen, or an error naming the
// first request that never ended, or nil, as Fold.Err.
func (f *StreamFold) Err() error {
	if f.err != nil {
		return f.err
	}
	for i := f.base; i < f.top; i++ {
		r := &f.ring[i&f.mask]
		if r.arrival == Never {
			return fmt.Errorf("request %d: records but no arrival", i+1)
		}
		if r.terminal == KindNone {
			return fmt.Errorf("request %d: never ended", i+1)
		}
	}
	return nil
}

// Reset empties the fold for reuse, keeping its memory.
func (f *StreamFold) Reset() {
	f.base, f.top, f.ended = 0, 0, 0
	f.refs = nil
	f.err = nil
}

// Clone copies the fold, sharing no state with it; the copy's End is f's
// (set it to the copy's own receiver where End belongs to one).
func (f *StreamFold) Clone() *StreamFold {
	c := *f
	c.ring = slices.Clone(f.ring)
	c.ct.classes = slices.Clone(f.ct.classes)
	c.ct.classIdx = maps.Clone(f.ct.classIdx)
	c.refs = maps.Clone(f.refs)
	return &c
}
