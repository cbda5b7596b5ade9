package journal

import (
	"github.com/narwhal-bench/narwhal-bench/event"
)

// Fold replays the journal through event.Fold and returns one Row per
// offered request, indexed by RequestID-1. With a life-cycle violation, or
// a request that never ended in a whole run, it returns the rows together
// with the fold's error; when the journal cannot be read it returns no
// rows and the read error. In a partial run (see Reader.Partial) requests
// that had not ended are rows with Terminal event.KindNone.
//
// Memory: the rows of the whole run are held at once, about 120 bytes per
// request (event.Row plus slice growth slack), so a 10-million-request run
// needs a little over a gigabyte. Class strings are interned by the reader
// and shared between rows.
func Fold(r *Reader) ([]event.Row, error) {
	var f event.Fold
	if err := r.Replay(func(rec *event.Record) error {
		f.Record(rec)
		return nil
	}); err != nil {
		return nil, err
	}
	return f.Rows(), foldErr(r, &f)
}

// foldErr is the fold's error for r: any life-cycle violation, and in a
// whole run also a request that never ended.
func foldErr(r *Reader, f *event.Fold) error {
	if r.Partial() != "" {
		return f.Violation()
	}
	return f.Err()
}

// RoleMove is one KindRoleMove record.
type RoleMove struct {
	Seq                  uint64
	At                   event.Time
	Inst                 event.Instance
	From, To             event.Role
	Cause                event.Cause // what moved it
	ResidentDecodeTokens int64       // decode tokens resident on Inst at the move
	ResidentPrefill      event.Time  // prefill work resident on Inst, profile time
	Reason               string
}

// Decision is one KindDecision record: a controller decision, as JSON.
type Decision struct {
	Seq  uint64
	At   event.Time
	Text string
}

// Fault is one KindFail or KindHealth record.
type Fault struct {
	Seq    uint64
	At     event.Time
	Kind   event.Kind // event.KindFail or event.KindHealth
	Inst   event.Instance
	Req    event.RequestID // 0 for health changes
	Cause  event.Cause     // failure cause, or why the health changed (engine_down, engine_up, operator)
	Tokens int64           // output tokens before the failure, or the process generation
	State  string          // a health change's new state, "down" or "up" ("" for a failure)
}

func roleMove(rec *event.Record) RoleMove {
	return RoleMove{Seq: rec.Seq, At: rec.At, Inst: rec.Inst, From: rec.From, To: rec.To, Cause: rec.Cause,
		ResidentDecodeTokens: rec.Tokens, ResidentPrefill: rec.Ref, Reason: rec.Text}
}

func fault(rec *event.Record) Fault {
	return Fault{Seq: rec.Seq, At: rec.At, Kind: rec.Kind, Inst: rec.Inst, Req: rec.Req, Cause: rec.Cause, Tokens: rec.Tokens, State: healthState(rec)}
}

// RoleMoves returns the run's role moves in Seq order.
func RoleMoves(r *Reader) ([]RoleMove, error) {
	var out []RoleMove
	err := r.Replay(func(rec *event.Record) error {
		if rec.Kind == event.KindRoleMove {
			out = append(out, roleMove(rec))
		}
		return nil
	})
	return out, err
}

// Decisions returns the run's controller decisions in Seq order.
func Decisions(r *Reader) ([]Decision, error) {
	var out []Decision
	err := r.Replay(func(rec *event.Record) error {
		if rec.Kind == event.KindDecision {
			out = append(out, Decision{Seq: rec.Seq, At: rec.At, Text: rec.Text})
		}
		return nil
	})
	return out, err
}

// Faults returns the run's request failures and health changes in Seq
// order.
func Faults(r *Reader) ([]Fault, error) {
	var out []Fault
	err := r.Replay(func(rec *event.Record) error {
		if rec.Kind == event.KindFail || rec.Kind == event.KindHealth {
			out = append(out, fault(rec))
		}
		return nil
	})
	return out, err
}
