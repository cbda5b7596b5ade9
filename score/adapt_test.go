package score

import (
	"math"
	"reflect"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

func move(at event.Time, from, to event.Role) event.Record {
	return event.Record{At: at, Kind: event.KindRoleMove, From: from, To: to}
}

const s = event.Second

// Opening roles set the first split; moves change it; simultaneous moves
// merge into one change.
func TestSplits(t *testing.T) {
	P, D, N := event.RolePrefill, event.RoleDecode, event.RoleNone
	moves := []event.Record{
		move(0, N, P), move(0, N, P), move(0, N, D), move(0, N, D),
		move(10*s, D, P),
		move(20*s, P, D), move(20*s, P, D),
		move(100*s, D, P),
	}
	want := []SplitChange{{At: 0, Prefill: 2}, {At: 10 * s, Prefill: 3}, {At: 20 * s, Prefill: 1}, {At: 100 * s, Prefill: 2}}
	got := Splits(moves)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Splits = %v, want %v", got, want)
	}
	if Moves(moves) != 4 {
		t.Fatalf("Moves = %d, want 4 (opening roles do not count)", Moves(moves))
	}
	// 2 -> 3 at 10 s, then down at 20 s: reversed within 30 s. 3 -> 1 at
	// 20 s, then up at 100 s: not within 30 s.
	if got := Thrash(got, 30*s); got != 1 {
		t.Fatalf("Thrash = %d, want 1", got)
	}
	if SplitAt(want, 15*s) != 3 || SplitAt(want, 0) != 2 || SplitAt(want, 1000*s) != 2 {
		t.Fatal("SplitAt")
	}
}

// A move that leaves the prefill pool's size as it was (decode to mixed
// and back, as a hybrid fleet leaves for the split it came from) is no
// change of the split: it neither counts as one nor hides a reversal.
func TestThrashAcrossUnchangedSize(t *testing.T) {
	P, D, M, N := event.RolePrefill, event.RoleDecode, event.RoleMixed, event.RoleNone
	moves := []event.Record{
		move(0, N, P), move(0, N, P), move(0, N, D), move(0, N, D),
		move(10*s, P, M), move(10*s, D, M), // 2 -> 1 prefill: hybrid 1P3M
		move(20*s, M, D), move(20*s, M, D), // 1P3D: the size unchanged
		move(30*s, D, P), // 1 -> 2: reverses the change at 10 s
	}
	sp := Splits(moves)
	if len(sp) != 4 {
		t.Fatalf("Splits = %v: expected four entries, one of them no change", sp)
	}
	if ch := Changes(sp); !reflect.DeepEqual(ch, []SplitChange{{At: 0, Prefill: 2}, {At: 10 * s, Prefill: 1}, {At: 30 * s, Prefill: 2}}) {
		t.Fatalf("Changes = %v", ch)
	}
	if got := Thrash(sp, 60*s); got != 1 {
		t.Fatalf("Thrash = %d, want 1: the move at 20 s leaves the size as it was", got)
	}
}

// A cover of a down engine's role and its undoing on the engine's return
// (causes engine_down and engine_up) are a fault's moves: a reversal they
// make, or take part in, is not thrash; a controller's reversal around
// them still is.
func TestThrashLeavesFaultCoversOut(t *testing.T) {
	P, D, N := event.RolePrefill, event.RoleDecode, event.RoleNone
	cause := func(r event.Record, c event.Cause) event.Record { r.Cause = c; return r }
	moves := []event.Record{
		move(0, N, P), move(0, N, D), move(0, N, D), move(0, N, D),
		cause(move(10*s, D, P), event.CauseEngineDown), // e0 down: 1 -> 2
		cause(move(20*s, P, D), event.CauseEngineUp),   // back: 2 -> 1
		cause(move(40*s, D, P), event.CauseController), // 1 -> 2
		cause(move(50*s, P, D), event.CauseController), // 2 -> 1: thrash
	}
	sp := Splits(moves)
	if !sp[1].Cover || !sp[2].Cover || sp[3].Cover {
		t.Fatalf("Splits = %+v: expected the moves at 10 s and 20 s marked as covers", sp)
	}
	if got := Thrash(sp, 30*s); got != 1 {
		t.Fatalf("Thrash = %d, want 1: the controller's reversal at 50 s, not the cover's at 20 s", got)
	}
	if Moves(moves) != 4 {
		t.Fatalf("Moves = %d, want 4: covers are moves", Moves(moves))
	}
}

func TestLag(t *testing.T) {
	splits := []SplitChange{{At: 0, Prefill: 1}, {At: 70 * s, Prefill: 2}, {At: 80 * s, Prefill: 3}, {At: 200 * s, Prefill: 1}}
	phases := []PhaseTarget{{0, 60 * s, 1}, {60 * s, 120 * s, 4}, {120 * s, 180 * s, 3}, {180 * s, 240 * s, 7}}
	lags, missed := Lag(splits, phases)
	// Phase 2 wants 4: within one engine (3) at 80 s, 20 s after it
	// starts. Phase 3 wants 3: already there. Phase 4 wants 7: never.
	if want := []event.Time{20 * s, 0, 60 * s}; !reflect.DeepEqual(lags, want) || missed != 1 {
		t.Fatalf("Lag = %v, %d missed; want %v, 1 missed", lags, missed, want)
	}
}

func TestSustained(t *testing.T) {
	r, ok := Sustained([]float64{1, 2, 3, 4}, []float64{1, 0.95, 0.89, 0.9}, 0.9)
	if !ok || r != 2 {
		t.Fatalf("Sustained = %v %v, want 2 (the last rate before the first failure, not the rebound at 4)", r, ok)
	}
	s := SustainedOf([]float64{3, 1, 2}, []float64{0.8, 1, 0.95}, 0.9)
	if !s.OK || s.Rate != 2 || s.GridTop || math.Abs(s.Crossing-2.333333333) > 1e-6 {
		t.Fatalf("SustainedOf = %+v, want rate 2, crossing 2.33 (unsorted grid)", s)
	}
	if s := SustainedOf([]float64{1, 2}, []float64{1, 0.95}, 0.9); !s.GridTop || s.Rate != 2 || !math.IsNaN(s.Crossing) {
		t.Fatalf("SustainedOf all passing = %+v, want grid top 2", s)
	}
	// Two runs at one rate (merged roots): the rate passes only if both
	// do, in either order.
	for _, att := range [][]float64{{1, 1, 0.45}, {1, 0.45, 1}} {
		if s := SustainedOf([]float64{1, 2, 2}, att, 0.9); s.Rate != 1 || s.GridTop {
			t.Fatalf("SustainedOf with a failing duplicate at 2 (%v) = %+v, want 1", att, s)
		}
	}
	if _, ok := Sustained([]float64{1}, []float64{0.5}, 0.9); ok {
		t.Fatal("no passing rate must report none")
	}
}

func TestSummarize(t *testing.T) {
	slo := event.SLO{TTFT: s, TPOT: s / 10}
	rows := []event.Row{
		{Terminal: event.KindFinish, Cause: event.CauseStop, FirstToken: s / 2, End: s, OutputTokens: 6},
		{Terminal: event.KindFinish, Cause: event.CauseLength, FirstToken: s / 2, End: s, OutputTokens: 6},
		{Terminal: event.KindRefuse},
		{Terminal: event.KindExpire},
	}
	sum := Summarize(rows, slo)
	if sum.Offered != 4 || sum.Completed != 2 || sum.Qualified != 1 || sum.Refused != 1 || sum.Expired != 1 ||
		sum.Misses[event.CheckLength] != 1 || sum.Attainment() != 0.25 {
		t.Fatalf("Summarize = %+v", sum)
	}
}
