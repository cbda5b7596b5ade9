package sweep

import (
	"context"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/score"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// simConfig is the run configuration Execute builds for a fleet.
func simConfig(t testing.TB, trace string, cache bool) (*traces.Trace, sim.Config) {
	tr, fl := load(t, trace)
	cfg := sim.Config{Profiles: fl.Profiles(), Pinned: fl.Pins(), SLO: fl.CoreSLO(), KV: fl.KVModel(), Batch: sim.DefaultBatch,
		DrainLimit: fl.Drain()}
	if fl.Batch != nil {
		cfg.Batch = *fl.Batch
	}
	if cache {
		cfg.Cache = sim.DefaultPrefixCache
	}
	if tr.SLO.TTFT > 0 {
		cfg.SLO.TTFT, cfg.SLO.TPOT = event.Time(tr.SLO.TTFT), event.Time(tr.SLO.TPOT)
	}
	return tr, cfg
}

// materialised runs a cell the way sweeps ran before they streamed: the
// whole trace generated, every record folded into a row per request, the
// rows summarised at the end.
func materialised(t *testing.T, tr *traces.Trace, cfg sim.Config, arm string, scale float64) (score.Summary, sim.Stats, []event.Row) {
	t.Helper()
	reqs, err := tr.Generate(tr.Seed, scale)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]sim.Request, len(reqs))
	for i := range reqs {
		w[i] = simRequest(&reqs[i])
	}
	ctrl, err := newController(arm, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var fold event.Fold
	s, err := sim.New(cfg, ctrl, w, &fold)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	if err := fold.Err(); err != nil {
		t.Fatal(err)
	}
	rows := fold.Rows()
	return score.Summarize(rows, cfg.SLO), st, rows
}

// A streamed cell (requests generated as the clock reaches them, outcomes
// scored as requests end) gives the outcomes of the materialised one:
// the same summary, the same rows, every offered request ended once.
func TestStreamedCellMatchesMaterialised(t *testing.T) {
	for _, c := range []struct {
		trace string
		cache bool
		arms  []string
		scale float64
	}{
		{"demo", false, []string{"static:4P4D", "aggregated", "adaptive", "arrow", "coldswap"}, 1.4},
		{"chatdoc", true, []string{"adaptive", "dynamo", "ray"}, 1},
		{"mixed", false, []string{"planner", "static:3P5D"}, 1.2},
	} {
		tr, cfg := simConfig(t, c.trace, c.cache)
		for _, arm := range c.arms {
			wantSum, wantSt, wantRows := materialised(t, tr, cfg, arm, c.scale)
			wl := &workload{trace: tr, seed: tr.Seed, scale: c.scale}
			var fold event.StreamFold
			run, err := runOne(context.Background(), cfg, arm, len(cfg.Profiles), 1, wl, cfg.SLO, nil, nil, &fold, nil, event.RunMeta{}, &MoveLog{})
			if err != nil {
				t.Fatal(err)
			}
			got := Run{Offered: wantSum.Offered, Completed: wantSum.Completed, SLOOK: wantSum.Qualified, Refused: wantSum.Refused,
				Expired: wantSum.Expired, Failed: wantSum.Failed, MissTTFT: wantSum.Misses[event.CheckTTFT],
				MissTPOT: wantSum.Misses[event.CheckTPOT], Moves: wantSt.Moves, SimSeconds: wantSt.End.Seconds()}
			if run.Offered != got.Offered || run.Completed != got.Completed || run.SLOOK != got.SLOOK || run.Refused != got.Refused ||
				run.Expired != got.Expired || run.Failed != got.Failed || run.MissTTFT != got.MissTTFT || run.MissTPOT != got.MissTPOT ||
				run.Moves != got.Moves || run.SimSeconds != got.SimSeconds || run.Attainment != wantSum.Attainment() {
				t.Errorf("%s %s: streamed %+v, materialised %+v", c.trace, arm, run, got)
			}
			// Row by row: the rows handed out as requests end are the
			// materialised fold's, each once.
			ctrl, _ := newController(arm, cfg)
			seen := make([]bool, len(wantRows))
			n := 0
			sf := &event.StreamFold{End: func(r *event.Row) {
				i := int(r.Req - 1)
				if seen[i] {
					t.Fatalf("%s %s: request %d ended twice", c.trace, arm, r.Req)
				}
				seen[i] = true
				if *r != wantRows[i] {
					t.Fatalf("%s %s: request %d: streamed row %+v, materialised %+v", c.trace, arm, r.Req, *r, wantRows[i])
				}
				n++
			}}
			s, done, err := wl.newSim(cfg, ctrl, sf)
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			if _, err := s.Run(); err != nil {
				t.Fatal(err)
			}
			if err := sf.Err(); err != nil || n != len(wantRows) || sf.Len() != len(wantRows) {
				t.Fatalf("%s %s: %d rows ended of %d, %v", c.trace, arm, n, len(wantRows), err)
			}
		}
	}
}

// A sweep's memory follows the requests in flight: a cell of 20 times the
// requests at the same load holds about as many rows in its fold.
func TestStreamedCellHoldsRequestsInFlight(t *testing.T) {
	tr, cfg := simConfig(t, "steady", false)
	held := func(seconds int) (int, int) {
		sp := *tr.Spec
		sp.Phases = append([]traces.Phase(nil), sp.Phases...)
		sp.Phases[0].Duration = time.Duration(seconds) * time.Second
		wl := &workload{trace: &traces.Trace{Name: sp.Name, Spec: &sp}, seed: 1, scale: 1}
		var fold event.StreamFold
		run, err := runOne(context.Background(), cfg, "adaptive", len(cfg.Profiles), 6, wl, cfg.SLO, nil, nil, &fold, nil, event.RunMeta{}, &MoveLog{})
		if err != nil {
			t.Fatal(err)
		}
		return run.Offered, fold.Held()
	}
	n1, small := held(500)
	n2, large := held(10000)
	t.Logf("rows held: %d for %d requests, %d for %d", small, n1, large, n2)
	if n2 < 15*n1 || large > 2*small || large > n1 {
		t.Fatalf("rows held: %d for %d requests, %d for %d: expected about the same", small, n1, large, n2)
	}
}
