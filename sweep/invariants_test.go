package sweep

import (
	"strings"
	"sync"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/internal/simcheck"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// checkSinks hands each run of a sweep a simcheck.Checker as its journal
// (records and tokens), by run name.
type checkSinks struct {
	t  *testing.T
	mu sync.Mutex
	c  map[string]*simcheck.Checker
}

type checkSink struct{ *simcheck.Checker }

func (checkSink) Close() error { return nil }

func (s *checkSinks) journal(name string, meta event.RunMeta) (Sink, error) {
	c := simcheck.New(s.t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c[name] != nil {
		s.t.Errorf("run %s journaled twice", name)
	}
	s.c[name] = c
	return checkSink{c}, nil
}

// phasedTrace is a small fleet's trace whose prefill/decode mix shifts by
// phase: short prompts with long answers, long prompts with short
// answers, then short prompts again; the best split moves with it.
func phasedTrace(t *testing.T) (*traces.Trace, *fleet.Spec) {
	t.Helper()
	sp, err := traces.Parse([]byte(`
name: phased
seed: 5
classes:
  chat:
    input:  {dist: lognormal, median: 300, sigma: 0.5, min: 16, max: 2048}
    output: {dist: lognormal, median: 400, sigma: 0.4, min: 32, max: 1500}
  doc:
    input:  {dist: uniform, min: 5000, max: 9000}
    output: {dist: lognormal, median: 30, sigma: 0.4, min: 4, max: 128}
phases:
  - {duration: 60s, rate: 1, mix: {chat: 1}}
  - {duration: 60s, rate: 1, mix: {doc: 1}}
  - {duration: 60s, rate: 1, mix: {chat: 1}}
`), "phased.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fleet.Parse([]byte(`
name: four
instances:
  count: 4
  profile: {a: 2.0e-8, b: 6.0e-5, c: 0.005, slope: 3.0e-6, intercept: 0.012}
slo: {ttft: 10s, tpot: 125ms}
kv: {latency: 50ms}
batch: {chunk_tokens: 2048, budget_tokens: 16384, kv_capacity_tokens: 105888}
drain_limit: 600s
`), "four")
	if err != nil {
		t.Fatal(err)
	}
	return &traces.Trace{Name: sp.Name, Spec: sp, Seed: sp.Seed}, fl
}

// helpArms is every arm --help lists (ArmHelp), as a fleet of n = 4 runs
// it, with the parameterised baselines core also knows.
func helpArms(t *testing.T) []string {
	t.Helper()
	var arms []string
	for _, h := range ArmHelp {
		arm := strings.Replace(h.Arm, "static:kPmD", "static:2P2D", 1)
		arm = strings.Replace(arm, "hybrid:kPmM", "hybrid:1P3M", 1)
		if err := CheckArm(arm, 4); err != nil {
			t.Fatalf("ArmHelp's %s: %v", h.Arm, err)
		}
		arms = append(arms, arm)
	}
	return append(arms, "dynamo:start=0s/busy=0", "ray:start=0s/target=2")
}

// Every arm --help lists, the hindsight arms included (their schedules
// only a sweep chooses: the phase-oracle's per phase, the oracle's by
// window search), runs in a sweep with every record and token through the
// simulator's invariant checker (internal/simcheck: life cycle, causality,
// and the roles at each placement, Arrow §5.2), on a trace whose mix
// shifts by phase: each run's journal is the checker. The hindsight arms
// move roles at their schedule's steps.
func TestSweepRunsHoldInvariants(t *testing.T) {
	tr, fl := phasedTrace(t)
	arms := helpArms(t)
	cs := &checkSinks{t: t, c: map[string]*simcheck.Checker{}}
	rate := 3.0
	res, err := Execute(Config{Trace: tr, Fleet: fl, Arms: arms, Rates: []float64{rate}, Seed: 5, Workers: 2, Journal: cs.journal})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := tr.Generate(5, rate/tr.MeanRate())
	if err != nil {
		t.Fatal(err)
	}
	want := make([]simcheck.Offered, len(gen))
	for i, q := range gen {
		want[i] = simcheck.OfferedAt(q.At, q.OutputTokens, q.OutputCap)
	}
	for _, r := range res.Runs {
		c := cs.c[RunName(r.Arm, r.Rate)]
		if c == nil {
			t.Errorf("%s: no journal: the run was not checked", r.Arm)
			continue
		}
		c.Finish(want, simcheck.Outcomes{Offered: r.Offered, Finished: r.Completed, Refused: r.Refused,
			Failed: r.Failed, Expired: r.Expired, Preemptions: r.Preemptions})
		t.Logf("%s: %d offered, %d moves, %d spilled, %d qualified, %d decode legs kept where a moved engine held their prompt", r.Arm, r.Offered, r.Moves, r.Spilled, r.SLOOK, c.Stays)
		if (r.Arm == "oracle" || r.Arm == "phase-oracle") && r.Moves == 0 {
			t.Errorf("%s: no role move on a trace whose best split changes by phase (oracle splits %+v)", r.Arm, res.Oracle)
		}
	}
	if len(res.Oracle) != 1 || res.Oracle[0].Source != "window search" {
		t.Errorf("oracle %+v: expected it to play its window search's schedule (a rival's run is checked as that arm)", res.Oracle)
	}
}
