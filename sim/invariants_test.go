package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/simcheck"
)

// checker is simcheck.Checker (the simulator's invariants on every record
// and token of a run, the roles included) fed by a sim run.
type checker struct {
	*simcheck.Checker
}

func newChecker(t testing.TB) *checker { return &checker{simcheck.New(t)} }

// hook is the run's sim.Config.TokenHook.
func (c *checker) hook(req event.RequestID, k int, at event.Time) { c.Token(req, k, at) }

// finish checks the run as a whole.
func (c *checker) finish(reqs []Request, st Stats) {
	c.Finish(offered(reqs), simcheck.Outcomes{Offered: st.Offered, Finished: st.Finished, Refused: st.Refused,
		Failed: st.Failed, Expired: st.Expired, Preemptions: st.Preemptions})
}

// offered is reqs as simcheck takes them: scheduled arrival and the output
// a finished request ends with (its answer, capped).
func offered(reqs []Request) []simcheck.Offered {
	out := make([]simcheck.Offered, len(reqs))
	for i, r := range reqs {
		out[i] = simcheck.OfferedAt(r.At, r.OutputTokens, r.OutputCap)
	}
	return out
}

// runChecked runs reqs on cfg under arm with every invariant checked.
func runChecked(t testing.TB, cfg Config, arm string, reqs []Request) (Stats, []event.Row) {
	t.Helper()
	c, st := runChecker(t, cfg, arm, reqs)
	return st, c.Fold.Rows()
}

// runChecker is runChecked returning the checker (its role moves too).
func runChecker(t testing.TB, cfg Config, arm string, reqs []Request) (*checker, Stats) {
	t.Helper()
	ctrl := mustController(t, arm, len(cfg.Profiles))
	if a, ok := ctrl.(*core.Adaptive); ok {
		a.Rehearser = NewRehearser(cfg, a.Cfg.Rehearsal) // as the drivers attach it
	}
	return runCheckerWith(t, cfg, ctrl, reqs)
}

// runCheckerWith is runChecker with a controller of the caller's; the
// run's records also go to each of also.
func runCheckerWith(t testing.TB, cfg Config, ctrl core.Controller, reqs []Request, also ...event.Recorder) (*checker, Stats) {
	t.Helper()
	c := newChecker(t)
	cfg.TokenHook = c.hook
	s, err := New(cfg, ctrl, reqs, append(event.Tee{c}, also...))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	c.finish(reqs, st)
	return c, st
}

// randomTrace draws n requests with mixed prompt and answer lengths.
func randomTrace(seed uint64, n int, rate float64) []Request {
	src := newRandomSource(seed, n, rate)
	reqs := make([]Request, n)
	for i := range reqs {
		src.Next(&reqs[i])
	}
	return reqs
}

// randomSource draws randomTrace's requests one at a time, holding none.
type randomSource struct {
	rng  *rand.Rand
	n    int
	rate float64
	t    float64
}

func newRandomSource(seed uint64, n int, rate float64) *randomSource {
	return &randomSource{rng: rand.New(rand.NewPCG(seed, 1)), n: n, rate: rate}
}

func (s *randomSource) Next(r *Request) bool {
	if s.n == 0 {
		return false
	}
	s.n--
	rng := s.rng
	s.t += rng.ExpFloat64() / s.rate
	in := 100 + rng.IntN(9000)
	if rng.IntN(2) == 0 {
		in = 50 + rng.IntN(500)
	}
	*r = Request{At: event.Seconds(s.t), InputTokens: in, OutputTokens: 1 + rng.IntN(400)}
	if rng.IntN(5) == 0 {
		r.OutputCap = 1 + rng.IntN(300)
	}
	return true
}

func (s *randomSource) Err() error { return nil }

// phasedTrace draws n requests whose prefill/decode mix shifts in
// phases of n/4: short prompts with long answers, long prompts with short
// answers, and again, so that the best split moves and the role-moving
// arms move.
func phasedTrace(seed uint64, n int, rate float64) []Request {
	rng := rand.New(rand.NewPCG(seed, 2))
	reqs := make([]Request, n)
	at := 0.0
	for i := range reqs {
		at += rng.ExpFloat64() / rate
		r := Request{At: event.Seconds(at), InputTokens: 100 + rng.IntN(400), OutputTokens: 200 + rng.IntN(400)}
		if i/(n/4)%2 == 1 {
			r.InputTokens, r.OutputTokens = 5000+rng.IntN(4000), 4+rng.IntN(40)
		}
		reqs[i] = r
	}
	return reqs
}

// invariantArms is every arm core knows (read from its own list of arm
// kinds, the one --help's is checked against: a new kind fails here until
// it has an invariant run) as a fleet of n = 4 runs it; moving says which
// arms move roles. The hindsight arms (oracle, phase-oracle), whose
// schedules only a sweep chooses, are checked by sweep's
// TestSweepRunsHoldInvariants with the same checker.
func invariantArms(t *testing.T) (arms []string, moving map[string]bool) {
	t.Helper()
	kinds := core.ArmKinds()
	moving = map[string]bool{}
	for _, k := range kinds {
		switch k {
		case "static:kPmD":
			arms = append(arms, core.StaticArms(4)...)
		case "static:kPmD/alg1": // Algorithm 1 placement, Arrow §5.3, with burst spill
			for _, a := range core.StaticArms(4) {
				arms = append(arms, a+"/alg1")
			}
		case "hybrid:kPmM":
			arms = append(arms, "hybrid:1P3M", "hybrid:2P2M")
		case "aggregated":
			arms = append(arms, k)
		case "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray":
			arms = append(arms, k)
			moving[k] = true
		case "dynamo:KEY=V":
			arms = append(arms, "dynamo:start=0s/busy=0")
			moving["dynamo:start=0s/busy=0"] = true
		case "ray:KEY=V":
			arms = append(arms, "ray:start=0s/target=2")
			moving["ray:start=0s/target=2"] = true
		case "oracle", "phase-oracle":
			// sweep's TestSweepRunsHoldInvariants.
		default:
			t.Errorf("arm kind %q (core's list) has no invariant run: add it to invariantArms", k)
		}
	}
	for _, k := range []string{"static:kPmD/alg1", "dynamo:KEY=V", "ray:KEY=V", "oracle", "phase-oracle"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("core's list of arms %q lacks %s", kinds, k)
		}
	}
	return arms, moving
}

// Every arm, the role-moving ones included, on random traces at light and
// overloaded rates and on a trace whose mix shifts in phases, with small
// and large batch budgets: the invariants hold on every run (the roles at
// every placement included, Arrow §5.2). On the phased trace every
// role-moving arm moves, and burst spill (Algorithm 1 placing a prompt on
// an idle decode engine) happens on the arms that place by Algorithm 1.
func TestInvariantsAcrossArms(t *testing.T) {
	arms, moving := invariantArms(t)
	spilled := 0
	for _, tr := range []string{"random", "phased"} {
		for _, rate := range []float64{0.5, 4, 30} {
			if tr == "phased" && rate != 4 {
				continue
			}
			for _, batch := range []Batch{DefaultBatch, {ChunkTokens: 512, BudgetTokens: 1024, MaxSeqs: 8}} {
				for _, arm := range arms {
					t.Run(fmt.Sprintf("%s/%s/rate=%v/budget=%d", arm, tr, rate, batch.BudgetTokens), func(t *testing.T) {
						cfg := refConfig(4)
						cfg.Batch = batch
						reqs := randomTrace(uint64(rate*100), 300, rate)
						if tr == "phased" {
							reqs = phasedTrace(7, 400, rate)
						}
						c, st := runChecker(t, cfg, arm, reqs)
						if st.Offered != len(reqs) {
							t.Fatalf("offered %d", st.Offered)
						}
						if strings.HasPrefix(arm, "adaptive") || strings.HasSuffix(arm, "/alg1") {
							spilled += c.Spilled
						}
						if tr == "phased" && moving[arm] && st.Moves == 0 {
							t.Errorf("%+v: no role move on a trace whose mix shifts in phases", st)
						}
					})
				}
			}
		}
	}
	if spilled == 0 {
		t.Error("no prompt spilled on adaptive or a /alg1 arm in any run: expected burst spill to be exercised")
	}
}

// The drain limit ends what is still open as expired, and every request
// still has exactly one outcome.
func TestDrainLimitExpires(t *testing.T) {
	cfg := refConfig(2)
	cfg.DrainLimit = 2 * event.Second
	reqs := randomTrace(3, 200, 50) // far beyond what 2 instances serve
	st, rows := runChecked(t, cfg, "static:1P1D", reqs)
	if st.Expired == 0 || st.Finished == 0 {
		t.Fatalf("finished %d expired %d: want both", st.Finished, st.Expired)
	}
	last := reqs[len(reqs)-1].At
	for _, r := range rows {
		if r.Terminal == event.KindExpire && (r.End != last+2*event.Second || r.Cause != event.CauseDrainLimit) {
			t.Fatalf("request %d expired at %v (%v), want at the drain limit %v", r.Req, r.End, r.Cause, last+2*event.Second)
		}
	}
}

// The queue admission gate on every arm: requests wait in the core's queue
// (the queue-wait column measures it), expire at their deadline or are
// refused, and the invariants hold; every request still ends exactly once.
func TestInvariantsWithAdmissionQueue(t *testing.T) {
	arms := []string{"static:2P2D", "aggregated", "adaptive", "arrow", "planner", "dynamo", "ray"}
	for _, rate := range []float64{0.5, 30} {
		for _, arm := range arms {
			t.Run(fmt.Sprintf("%s/rate=%v", arm, rate), func(t *testing.T) {
				cfg := refConfig(4)
				cfg.Admission = core.Admission{Mode: core.AdmitQueue, Deadline: 5 * event.Second}
				reqs := randomTrace(uint64(rate*100), 300, rate)
				st, rows := runChecked(t, cfg, arm, reqs)
				if st.Offered != 300 {
					t.Fatalf("offered %d", st.Offered)
				}
				waited, timedOut := 0, 0
				for _, r := range rows {
					if r.Admit != event.Never && r.Admit > r.Arrival {
						waited++
					}
					if r.Terminal == event.KindExpire && r.Cause == event.CauseQueueTimeout {
						timedOut++
					}
				}
				if rate == 30 && (waited == 0 || timedOut == 0) && arm != "ray" && arm != "dynamo" {
					t.Fatalf("overloaded: %d requests waited in the queue, %d timed out: expected both", waited, timedOut)
				}
			})
		}
	}
}

// A large fleet's adaptive controller moves several engines in one
// decision when a phase change makes a far split score best (steps of up
// to a sixteenth of the fleet), and the invariants hold.
func TestAdaptiveMovesSeveralEnginesOnALargeFleet(t *testing.T) {
	cfg := refConfig(64)
	// Decode-heavy, then prefill-heavy: the best split moves far.
	var reqs []Request
	rng := rand.New(rand.NewPCG(5, 5))
	at := 0.0
	for i := 0; i < 6000; i++ {
		at += rng.ExpFloat64() / 40
		r := Request{At: event.Seconds(at), InputTokens: 200 + rng.IntN(200), OutputTokens: 300 + rng.IntN(300)}
		if at > 60 {
			r.InputTokens, r.OutputTokens = 6000+rng.IntN(3000), 20+rng.IntN(40)
		}
		reqs = append(reqs, r)
	}
	c, st := runChecker(t, cfg, "adaptive", reqs)
	most := 0
	for _, n := range c.Moves {
		most = max(most, n)
	}
	if most < 2 {
		t.Fatalf("at most %d engine moved at one instant over %d moves: expected multi-engine steps on 64 engines", most, st.Moves)
	}
}

// A KV capacity a few prompts wide: decode streams are preempted
// (newest first), recompute their context and decode on. On every arm the
// invariants hold: every request ends exactly once, no token comes twice
// or before the one it follows, a finished request has all its tokens;
// and with a short drain limit, requests preempted or recomputing when it
// passes expire with the tokens they had.
func TestInvariantsUnderPreemption(t *testing.T) {
	arms := []string{"static:2P2D", "static:1P3D", "aggregated", "adaptive", "arrow", "planner", "dynamo"}
	for _, drain := range []event.Time{0, 20 * event.Second} {
		for _, rate := range []float64{4, 30} {
			preempted := 0
			for _, arm := range arms {
				t.Run(fmt.Sprintf("%s/rate=%v/drain=%v", arm, rate, drain), func(t *testing.T) {
					cfg := refConfig(4)
					cfg.Batch = Batch{ChunkTokens: 2048, BudgetTokens: 16384, KVCapacityTokens: 16000}
					cfg.DrainLimit = drain
					reqs := randomTrace(uint64(rate*10)+7, 300, rate)
					st, rows := runChecked(t, cfg, arm, reqs)
					preempted += st.Preemptions
					if drain > 0 && st.Expired == 0 && rate == 30 {
						t.Errorf("%+v: expected requests to expire at the drain limit", st)
					}
					for _, r := range rows {
						if r.Terminal == event.KindExpire && r.OutputTokens > r.WantOutput {
							t.Errorf("request %d expired with %d tokens of %d", r.Req, r.OutputTokens, r.WantOutput)
						}
					}
				})
			}
			if rate == 30 && preempted == 0 {
				t.Errorf("rate %v drain %v: no preemption on any arm: expected the KV capacity to bind", rate, drain)
			}
		}
	}
}
