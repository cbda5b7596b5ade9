package score

import (
	"sort"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// SplitChange is the prefill pool's size from At on.
type SplitChange struct {
	At      event.Time
	Prefill int
	// Cover: a move at At covered a down engine's role, or undid such a
	// cover on its return (cause engine_down or engine_up): the fault's
	// doing, not a controller's, so no reversal it takes part in is
	// thrash.
	Cover bool
}

// Splits folds a run's role-move records (in order) into the prefill pool
// size over time. The opening roles (From = RoleNone) set the first entry.
func Splits(moves []event.Record) []SplitChange {
	var out []SplitChange
	p := 0
	for _, m := range moves {
		if m.Kind != event.KindRoleMove {
			continue
		}
		if m.From == event.RolePrefill {
			p--
		}
		if m.To == event.RolePrefill {
			p++
		}
		cover := m.Cause == event.CauseEngineDown || m.Cause == event.CauseEngineUp
		if n := len(out); n > 0 && out[n-1].At == m.At {
			out[n-1].Prefill = p
			out[n-1].Cover = out[n-1].Cover || cover
			continue
		}
		out = append(out, SplitChange{At: m.At, Prefill: p, Cover: cover})
	}
	return out
}

// Moves counts role moves, not counting opening roles.
func Moves(moves []event.Record) int {
	n := 0
	for _, m := range moves {
		if m.Kind == event.KindRoleMove && !m.Opening() {
			n++
		}
	}
	return n
}

// DefaultThrashWindow is how soon a reversed move counts as thrash.
const DefaultThrashWindow = 30 * event.Second

// ReversalWindow is how soon a reversed change of the split counts as a
// reversal in the sweep's robustness figures (issue 10: reversals within
// 60 s at most 10% of moves).
const ReversalWindow = 60 * event.Second

// Changes keeps the entries of splits that change the prefill pool's size
// (the first entry, the opening, always): role moves that leave it as it
// was (decode to mixed, say, as a hybrid fleet leaves for the split it
// came from) are no change of the split.
func Changes(splits []SplitChange) []SplitChange {
	out := splits[:0:0]
	for _, s := range splits {
		if n := len(out); n > 0 && out[n-1].Prefill == s.Prefill {
			continue
		}
		out = append(out, s)
	}
	return out
}

// Thrash counts moves reversed within window: a change of the prefill pool
// size followed, within window, by a change in the other direction (moves
// that leave the size as it was in between do not hide a reversal). A
// reversal one of whose changes covers a down engine's role, or undoes
// that cover (SplitChange.Cover), is a fault's and does not count.
func Thrash(splits []SplitChange, window event.Time) int {
	splits = Changes(splits)
	n := 0
	for i := 1; i+1 < len(splits); i++ {
		d1 := splits[i].Prefill - splits[i-1].Prefill
		d2 := splits[i+1].Prefill - splits[i].Prefill
		if d1*d2 < 0 && splits[i+1].At-splits[i].At <= window && !splits[i].Cover && !splits[i+1].Cover {
			n++
		}
	}
	return n
}

// PhaseTarget is the split the oracle chose for a phase.
type PhaseTarget struct {
	Start, End event.Time
	Prefill    int
}

// SplitAt returns the prefill pool size at t.
func SplitAt(splits []SplitChange, t event.Time) int {
	i := sort.Search(len(splits), func(i int) bool { return splits[i].At > t })
	if i == 0 {
		return 0
	}
	return splits[i-1].Prefill
}

// Lag measures adaptation after each phase change (every phase but the
// first): the time from the phase's start until the split is first within
// one engine of the oracle's split for that phase. A phase the split never
// reaches counts its whole duration and is reported in missed.
func Lag(splits []SplitChange, phases []PhaseTarget) (lags []event.Time, missed int) {
	for k := 1; k < len(phases); k++ {
		ph := phases[k]
		within := func(p int) bool { return p-ph.Prefill <= 1 && ph.Prefill-p <= 1 }
		lag := event.Time(-1)
		if within(SplitAt(splits, ph.Start)) {
			lag = 0
		} else {
			for _, s := range splits {
				if s.At > ph.Start && s.At < ph.End && within(s.Prefill) {
					lag = s.At - ph.Start
					break
				}
			}
		}
		if lag < 0 {
			lag = ph.End - ph.Start
			missed++
		}
		lags = append(lags, lag)
	}
	return lags, missed
}
