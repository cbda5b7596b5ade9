package event

import "fmt"

// Row is one offered request folded from its records. Times are Never
// when the request never reached that point.
type Row struct {
	Req          RequestID
	Class        string
	Scheduled    Time     // when the trace scheduled it to be sent
	Arrival      Time     // when it reached the system
	Admit        Time     // when it was placed for prefill
	FirstToken   Time     // when its prefill finished (first output token)
	End          Time     // when it ended (finish, refuse, expire, fail)
	PrefillInst  Instance // NoInstance when never placed
	DecodeInst   Instance // NoInstance when never placed for decode
	Crossed      bool     // decode ran on another instance than prefill
	InputTokens  int64
	WantOutput   int64  // output tokens the trace asked for
	OutputTokens int64  // output tokens produced, first token included
	CachedTokens int64  // prompt tokens served from the prefix cache
	Terminal     Kind   // KindFinish, KindRefuse, KindExpire, KindFail; KindNone while open
	Cause        Cause  // finish reason or refusal/expiry/failure cause
	Reference    string // the trace's reference answer (KindArrival Text); empty when none
	Response     string // the response text (KindFinish Text); empty when the driver has none
}

// Completed reports whether the request finished (naturally or at its cap).
func (r *Row) Completed() bool { return r.Terminal == KindFinish }

// TTFT is the time to first token measured from the scheduled send time, or
// Never when no first token exists.
func (r *Row) TTFT() Time {
	if r.FirstToken == Never {
		return Never
	}
	return r.FirstToken - r.Scheduled
}

// TPOT is the mean gap between output tokens after the first, or Never when
// the request produced fewer than two tokens or did not finish.
func (r *Row) TPOT() Time {
	if r.Terminal != KindFinish || r.OutputTokens < 2 || r.FirstToken == Never {
		return Never
	}
	return (r.End - r.FirstToken) / Time(r.OutputTokens-1)
}

// Fold turns a run's records into one Row per offered request. Request IDs
// are expected to be dense (1..N), as both drivers assign them.
type Fold struct {
	rows []Row
	err  error
}

func newRow(id RequestID) Row {
	return Row{Req: id, Scheduled: Never, Arrival: Never, Admit: Never, FirstToken: Never,
		End: Never, PrefillInst: NoInstance, DecodeInst: NoInstance}
}

// Record folds one record. Violations of the request life cycle (a second
// terminal record, a record before the arrival) are kept as the first
// error, reported by Err.
func (f *Fold) Record(rec *Record) {
	if rec.Req <= 0 {
		return
	}
	i := int(rec.Req - 1)
	if i >= cap(f.rows) {
		// Double, rather than append's 1.25x for large slices: a run of a
		// million requests then copies its rows about twice, not four times.
		grown := make([]Row, len(f.rows), max(2*cap(f.rows), i+1, 1024))
		copy(grown, f.rows)
		f.rows = grown
	}
	for len(f.rows) <= i {
		f.rows = append(f.rows, newRow(RequestID(len(f.rows)+1)))
	}
	r := &f.rows[i]
	if rec.Kind != KindArrival && r.Arrival == Never {
		f.fail(fmt.Errorf("request %d: %s at %v before its arrival", rec.Req, rec.Kind, rec.At))
	}
	if r.Terminal != KindNone {
		f.fail(fmt.Errorf("request %d: %s at %v after it ended with %s", rec.Req, rec.Kind, rec.At, r.Terminal))
		return
	}
	switch rec.Kind {
	case KindArrival:
		if r.Arrival != Never {
			f.fail(fmt.Errorf("request %d arrived twice", rec.Req))
		}
		r.Arrival, r.Scheduled = rec.At, rec.Ref
		r.InputTokens, r.WantOutput, r.Class = rec.Tokens, rec.Want, rec.Class
		r.Reference = rec.Text
	case KindAdmit:
		r.Admit, r.PrefillInst = rec.At, rec.Inst
	case KindPrefillStart:
		r.CachedTokens = rec.Tokens
	case KindPrefillDone:
		r.FirstToken = rec.At
		r.OutputTokens = 1
	case KindDecodeStart:
		r.DecodeInst = rec.Inst
		r.Crossed = rec.Cause == CauseCrossed
	case KindFinish, KindExpire, KindFail, KindRefuse:
		r.Terminal, r.Cause, r.End = rec.Kind, rec.Cause, rec.At
		if rec.Kind != KindRefuse {
			r.OutputTokens = rec.Tokens
		}
		if rec.Kind == KindFinish {
			r.Response = rec.Text
		}
	}
}

func (f *Fold) fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

// Rows returns the folded rows, indexed by RequestID-1.
func (f *Fold) Rows() []Row { return f.rows }

// Err returns the first life-cycle violation seen, or an error naming the
// first request that never ended, or nil.
func (f *Fold) Err() error {
	if f.err != nil {
		return f.err
	}
	for i := range f.rows {
		if f.rows[i].Arrival == Never {
			return fmt.Errorf("request %d: records but no arrival", f.rows[i].Req)
		}
		if f.rows[i].Terminal == KindNone {
			return fmt.Errorf("request %d: never ended", f.rows[i].Req)
		}
	}
	return nil
}

// Reset empties the fold for reuse, keeping its memory.
func (f *Fold) Reset() {
	f.rows = f.rows[:0]
	f.err = nil
}
