package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// checker asserts the simulator's invariants on every record and token of
// a run: the clock never goes back, every offered request ends exactly
// once, token k never comes before token k-1, the first token comes after
// the arrival, decode never starts before the first token exists, a
// spilled prompt runs on a decode engine.
type checker struct {
	t        testing.TB
	last     event.Time
	seq      uint64
	fold     event.Fold
	tokens   map[event.RequestID][]event.Time
	first    map[event.RequestID]event.Time
	errs     int
	moves    map[event.Time]int // role moves (not opening roles) per instant
	preempts int                // KindPreempt records
	roles    map[event.Instance]event.Role
	spilled  int // admits with cause spilled
}

func newChecker(t testing.TB) *checker {
	return &checker{t: t, tokens: map[event.RequestID][]event.Time{}, first: map[event.RequestID]event.Time{}}
}

func (c *checker) errorf(format string, args ...any) {
	c.errs++
	if c.errs <= 10 {
		c.t.Errorf(format, args...)
	}
}

func (c *checker) Record(r *event.Record) {
	if r.Seq != c.seq+1 {
		c.errorf("record seq %d after %d", r.Seq, c.seq)
	}
	c.seq = r.Seq
	if r.Kind == event.KindRoleMove {
		if c.roles == nil {
			c.roles = map[event.Instance]event.Role{}
		}
		c.roles[r.Inst] = r.To
	}
	if r.Kind == event.KindAdmit && r.Cause == event.CauseSpilled {
		// Burst spill places a prompt only on a decode engine.
		c.spilled++
		if ro := c.roles[r.Inst]; ro != event.RoleDecode {
			c.errorf("request %d: prompt spilled to %d in role %s: expected a decode engine", r.Req, r.Inst, ro)
		}
	}
	if r.Kind == event.KindRoleMove && !r.Opening() {
		if c.moves == nil {
			c.moves = map[event.Time]int{}
		}
		c.moves[r.At]++
	}
	if r.At < c.last {
		c.errorf("clock went back: %s at %v after %v", r.Kind, r.At, c.last)
	}
	c.last = r.At
	switch r.Kind {
	case event.KindPreempt:
		c.preempts++
		if f, ok := c.first[r.Req]; !ok || r.At < f {
			c.errorf("request %d: preempted at %v before its first token", r.Req, r.At)
		}
	case event.KindPrefillDone:
		c.first[r.Req] = r.At
	case event.KindDecodeStart:
		if f, ok := c.first[r.Req]; !ok || r.At < f {
			c.errorf("request %d: decode placed at %v before its first token (%v, %v)", r.Req, r.At, f, ok)
		}
	}
	c.fold.Record(r)
}

func (c *checker) hook(req event.RequestID, k int, at event.Time) {
	ts := c.tokens[req]
	if k != len(ts)+1 {
		c.errorf("request %d: token %d reported after %d tokens", req, k, len(ts))
	}
	if len(ts) > 0 && at < ts[len(ts)-1] {
		c.errorf("request %d: token %d at %v before token %d at %v", req, k, at, k-1, ts[len(ts)-1])
	}
	c.tokens[req] = append(ts, at)
}

// finish checks the run as a whole.
func (c *checker) finish(reqs []Request, st Stats) {
	if err := c.fold.Err(); err != nil {
		c.errorf("life cycle: %v", err)
	}
	rows := c.fold.Rows()
	if len(rows) != len(reqs) {
		c.errorf("%d requests folded, %d offered", len(rows), len(reqs))
	}
	if c.preempts != st.Preemptions {
		c.errorf("%d preempt records, %d preemptions counted", c.preempts, st.Preemptions)
	}
	if got := st.Finished + st.Refused + st.Failed + st.Expired; got != st.Offered {
		c.errorf("outcomes %d finished + %d refused + %d expired != %d offered", st.Finished, st.Refused, st.Expired, st.Offered)
	}
	for i := range rows {
		r := &rows[i]
		if r.Scheduled != reqs[i].At || r.Arrival < r.Scheduled {
			c.errorf("request %d: scheduled %v arrival %v, trace says %v", r.Req, r.Scheduled, r.Arrival, reqs[i].At)
		}
		if r.FirstToken != event.Never && r.TTFT() <= 0 {
			c.errorf("request %d: TTFT %v, want > 0", r.Req, r.TTFT())
		}
		if r.Terminal == event.KindFinish {
			ts := c.tokens[r.Req]
			if int64(len(ts)) != r.OutputTokens {
				c.errorf("request %d: %d tokens seen, finish says %d", r.Req, len(ts), r.OutputTokens)
			} else if ts[0] != r.FirstToken || ts[len(ts)-1] != r.End {
				c.errorf("request %d: tokens span %v..%v, records say %v..%v", r.Req, ts[0], ts[len(ts)-1], r.FirstToken, r.End)
			}
			want := reqs[i].OutputTokens
			if reqs[i].OutputCap > 0 && want > reqs[i].OutputCap {
				want = reqs[i].OutputCap
			}
			if int(r.OutputTokens) != want {
				c.errorf("request %d: %d tokens, want %d", r.Req, r.OutputTokens, want)
			}
		}
	}
}

// runChecked runs reqs on cfg under arm with every invariant checked.
func runChecked(t testing.TB, cfg Config, arm string, reqs []Request) (Stats, []event.Row) {
	t.Helper()
	c, st := runChecker(t, cfg, arm, reqs)
	return st, c.fold.Rows()
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

// Every arm, the role-moving ones included, on random traces at light and
// overloaded rates, with small and large batch budgets: the invariants
// hold on every run.
func TestInvariantsAcrossArms(t *testing.T) {
	arms := append(core.StaticArms(4), "aggregated", "hybrid:1P3M", "hybrid:2P2M", "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray")
	for _, rate := range []float64{0.5, 4, 30} {
		for _, batch := range []Batch{DefaultBatch, {ChunkTokens: 512, BudgetTokens: 1024, MaxSeqs: 8}} {
			for _, arm := range arms {
				t.Run(fmt.Sprintf("%s/rate=%v/budget=%d", arm, rate, batch.BudgetTokens), func(t *testing.T) {
					cfg := refConfig(4)
					cfg.Batch = batch
					reqs := randomTrace(uint64(rate*100), 300, rate)
					st, _ := runChecked(t, cfg, arm, reqs)
					if st.Offered != 300 {
						t.Fatalf("offered %d", st.Offered)
					}
				})
			}
		}
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
	for _, n := range c.moves {
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
