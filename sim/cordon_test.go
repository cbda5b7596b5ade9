package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// recorder keeps every record of a run.
type recorder struct{ recs []event.Record }

func (r *recorder) Record(rec *event.Record) { r.recs = append(r.recs, *rec) }

// A maintenance window on every arm: the engine is cordoned at its start
// (a health record, cause operator) and uncordoned at its end, takes no
// new prompt or decode from another engine in between (the checker's
// rule), work resident there runs on, every invariant holds, and the run
// is deterministic. A window the core refuses (the last online engine of
// a role none can take over) is journaled as a decision and leaves the
// engine in service.
func TestCordonWindows(t *testing.T) {
	arms := []string{"static:2P2D", "static:2P2D/alg1", "aggregated", "hybrid:1P3M", "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray"}
	reqs := randomTrace(7, 400, 12)
	for _, arm := range arms {
		t.Run(arm, func(t *testing.T) {
			cfg := refConfig(4)
			cfg.Cordons = []Cordon{{Inst: 3, From: 10 * event.Second, Until: 40 * event.Second}, {Inst: 1, From: 45 * event.Second, Until: 60 * event.Second}}
			var health []string
			var rec recorder
			_, st := runCheckerWith(t, cfg, mustController(t, arm, 4), reqs, &rec)
			if st.Finished == 0 || st.Failed != 0 {
				t.Fatalf("%+v: expected requests finished and none failed (a cordon fails nothing, work on the engine included)", st)
			}
			// With the admission queue too: an uncordon drains the queue
			// onto the engine after its health record.
			qcfg := cfg
			qcfg.Admission = core.Admission{Mode: core.AdmitQueue, Deadline: 5 * event.Second}
			if _, qst := runCheckerWith(t, qcfg, mustController(t, arm, 4), reqs); qst.Failed != 0 {
				t.Errorf("queue gate: %+v", qst)
			}
			refused := 0
			for _, r := range rec.recs {
				switch {
				case r.Kind == event.KindHealth:
					health = append(health, fmt.Sprintf("%d %s %s %.0fs", r.Inst, r.Text, r.Cause, r.At.Seconds()))
				case r.Kind == event.KindDecision && strings.Contains(r.Text, `"refused"`):
					refused++
				}
			}
			want := []string{"3 down operator 10s", "3 up operator 40s", "1 down operator 45s", "1 up operator 60s"}
			if len(health) != 2*(2-refused) {
				t.Fatalf("health records %v with %d refused: expected a down and an up per window", health, refused)
			}
			if refused == 0 && strings.Join(health, ", ") != strings.Join(want, ", ") {
				t.Errorf("health records %v, expected %v", health, want)
			}
			// Deterministic: the same run again journals the same records.
			var again recorder
			runCheckerWith(t, cfg, mustController(t, arm, 4), reqs, &again)
			if len(again.recs) != len(rec.recs) {
				t.Fatalf("second run: %d records, first %d", len(again.recs), len(rec.recs))
			}
			for i := range rec.recs {
				if rec.recs[i] != again.recs[i] {
					t.Fatalf("record %d differs: %+v and %+v", i, rec.recs[i], again.recs[i])
				}
			}
		})
	}
}

// Cordoning a static split's one prefill engine moves a decode engine
// into prefill for the window (cause engine_down), and the uncordon sends
// it back (cause engine_up): the split after the window is the split's
// own, with every invariant held, placed either way.
func TestCordonCoverReturns(t *testing.T) {
	for _, arm := range []string{"static:1P3D", "static:1P3D/alg1"} {
		t.Run(arm, func(t *testing.T) {
			cfg := refConfig(4)
			cfg.Cordons = []Cordon{{Inst: 0, From: 10 * event.Second, Until: 40 * event.Second}}
			var rec recorder
			_, st := runCheckerWith(t, cfg, mustController(t, arm, 4), randomTrace(7, 400, 12), &rec)
			if st.Failed != 0 {
				t.Fatalf("%+v: expected none failed", st)
			}
			var moves []string
			roles := map[event.Instance]event.Role{}
			for _, r := range rec.recs {
				if r.Kind == event.KindRoleMove {
					roles[r.Inst] = r.To
					if !r.Opening() {
						moves = append(moves, fmt.Sprintf("%d %s->%s %s %.0fs", r.Inst, r.From, r.To, r.Cause, r.At.Seconds()))
					}
				}
			}
			if len(moves) != 2 || !strings.Contains(moves[0], "decode->prefill engine_down 10s") || !strings.Contains(moves[1], "prefill->decode engine_up 40s") ||
				moves[0][:strings.Index(moves[0], " ")] != moves[1][:strings.Index(moves[1], " ")] {
				t.Fatalf("moves %v: expected one decode engine into prefill at 10 s and back at 40 s", moves)
			}
			prefill := 0
			for _, r := range roles {
				if r == event.RolePrefill {
					prefill++
				}
			}
			if prefill != 1 {
				t.Errorf("roles at the end %v: expected one prefill engine", roles)
			}
		})
	}
}

// A cordon that would leave a role uncovered is refused: on a 1P1D
// split neither engine can go.
func TestCordonRefused(t *testing.T) {
	cfg := refConfig(2)
	cfg.Cordons = []Cordon{{Inst: 0, From: 5 * event.Second, Until: 20 * event.Second}}
	var rec recorder
	runCheckerWith(t, cfg, mustController(t, "static:1P1D", 2), randomTrace(3, 100, 2), &rec)
	var decisions []string
	for _, r := range rec.recs {
		if r.Kind == event.KindHealth {
			t.Errorf("a health record: %+v", r)
		}
		if r.Kind == event.KindDecision && strings.Contains(r.Text, "refused") {
			decisions = append(decisions, r.Text)
		}
	}
	if len(decisions) != 1 || !strings.Contains(decisions[0], `"refused":"last_in_role"`) {
		t.Errorf("decisions %v: expected one last_in_role refusal", decisions)
	}
	// Bad windows are refused by Validate, naming the field.
	for _, w := range []Cordon{{Inst: 2, From: 0, Until: 1}, {Inst: 0, From: 5, Until: 5}, {Inst: 0, From: 10 * event.Second, Until: 12 * event.Second}} {
		bad := cfg
		bad.Cordons = append([]Cordon{{Inst: 0, From: 5 * event.Second, Until: 20 * event.Second}}, w)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "cordons[1]") {
			t.Errorf("%+v: %v", w, err)
		}
	}
}

// Windows of one engine that touch, listed out of order, both hold: the
// first's close comes before the second's open at their shared instant.
func TestCordonTouchingWindows(t *testing.T) {
	cfg := refConfig(4)
	cfg.Cordons = []Cordon{{Inst: 3, From: 20 * event.Second, Until: 30 * event.Second}, {Inst: 3, From: 10 * event.Second, Until: 20 * event.Second}}
	var rec recorder
	runCheckerWith(t, cfg, mustController(t, "static:2P2D", 4), randomTrace(5, 300, 6), &rec)
	var health []string
	for _, r := range rec.recs {
		if r.Kind == event.KindHealth {
			health = append(health, fmt.Sprintf("%s@%.0fs", r.Text, r.At.Seconds()))
		}
	}
	if got := strings.Join(health, " "); got != "down@10s up@20s down@20s up@30s" {
		t.Errorf("health records %s", got)
	}
}
