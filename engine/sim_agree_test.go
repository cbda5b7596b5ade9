package engine_test

import (
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// workload is a small mixed trace: short and long prompts (some span
// several chunks), short and long answers (some of one token), arrivals
// close enough that prefill and decode share iterations.
func workload(seed uint64, n int) []sim.Request {
	rng := rand.New(rand.NewPCG(seed, 7))
	reqs := make([]sim.Request, n)
	at := event.Time(0)
	for i := range reqs {
		at += event.Time(rng.Int64N(int64(150 * event.Millisecond)))
		in := 20 + rng.IntN(3000)
		if i%7 == 3 {
			in = 4000 + rng.IntN(3000)
		}
		out := 1 + rng.IntN(120)
		if i%5 == 2 {
			out = 1
		}
		reqs[i] = sim.Request{At: at + 1 + event.Time(rng.Int64N(1000)), InputTokens: in, OutputTokens: out}
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].At < reqs[j].At })
	return reqs
}

// setSLO sets a generous SLO (nothing is refused) by field name, in
// seconds or in event.Time, whichever type the simulator's SLO uses.
func setSLO(cfg *sim.Config, ttft, tpot float64) {
	slo := reflect.ValueOf(cfg).Elem().FieldByName("SLO")
	for name, secs := range map[string]float64{"TTFT": ttft, "TPOT": tpot} {
		f := slo.FieldByName(name)
		if f.Type() == reflect.TypeOf(event.Time(0)) {
			f.SetInt(int64(event.Seconds(secs)))
		} else {
			f.SetFloat(secs)
		}
	}
}

type tokenTimes map[uint64][]event.Time

func simTokens(t *testing.T, arm string, n int, b sim.Batch, reqs []sim.Request) (tokenTimes, sim.Stats) {
	t.Helper()
	cfg := sim.Config{KV: timing.FlatKV, Batch: b}
	for range n {
		cfg.Profiles = append(cfg.Profiles, timing.Reference)
	}
	setSLO(&cfg, 1000, 10)
	got := tokenTimes{}
	cfg.TokenHook = func(req event.RequestID, k int, at event.Time) {
		if k != len(got[uint64(req)])+1 {
			t.Fatalf("sim: request %d: token %d after %d", req, k, len(got[uint64(req)]))
		}
		got[uint64(req)] = append(got[uint64(req)], at)
	}
	ctrl, err := core.NewController(arm, n)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(cfg, ctrl, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	if st.Finished != len(reqs) {
		t.Fatalf("sim: %+v: expected every request to finish", st)
	}
	return got, st
}

// driver runs engines on a virtual clock: arrivals first at an instant,
// then KV arrivals and iteration ends in time order; an idle engine with
// work starts once everything at that instant is in.
type driver struct {
	t    *testing.T
	engs []*engine.Engine
	ends []event.Time // iteration end per engine (Never when idle)
	kv   []kvReady
	now  event.Time
	got  tokenTimes
	// most decode streams seen waiting to join and running at once
	maxWaiting, maxRunning int
	onEvt                  func(d *driver, eng int, ev engine.Event)
}

type kvReady struct {
	at      event.Time
	id      uint64
	in, out int
}

func (d *driver) run(reqs []sim.Request, arrive func(d *driver, id uint64, r sim.Request)) {
	next := 0
	for {
		at, which := event.Never, -1
		for i, e := range d.ends {
			if e < at {
				at, which = e, i
			}
		}
		kvAt := event.Never
		if len(d.kv) > 0 {
			kvAt = d.kv[0].at
		}
		switch {
		case next < len(reqs) && reqs[next].At <= min(at, kvAt):
			d.now = reqs[next].At
			arrive(d, uint64(next+1), reqs[next])
			next++
		case kvAt < at:
			k := d.kv[0]
			d.kv = d.kv[1:]
			d.now = k.at
			if err := d.engs[1].AddDecode(k.id, k.in, 1, k.out); err != nil {
				d.t.Fatal(err)
			}
		case which >= 0:
			d.now = at
			d.ends[which] = event.Never
			for _, ev := range d.engs[which].Finish() {
				if ev.Kind == engine.Token {
					if ev.K != len(d.got[ev.ID])+1 {
						d.t.Fatalf("engine: request %d: token %d after %d", ev.ID, ev.K, len(d.got[ev.ID]))
					}
					d.got[ev.ID] = append(d.got[ev.ID], d.now)
				}
				if d.onEvt != nil {
					d.onEvt(d, which, ev)
				}
			}
			d.startIdle(which) // the simulator starts the next iteration at once
			continue
		default:
			return
		}
		// New work at d.now: idle engines start after this instant's
		// other arrivals.
		if (next < len(reqs) && reqs[next].At == d.now) || (len(d.kv) > 0 && d.kv[0].at == d.now) {
			continue
		}
		for i := range d.engs {
			d.startIdle(i)
		}
	}
}

func (d *driver) startIdle(i int) {
	if d.engs[i].Busy() {
		return
	}
	if dur, busy := d.engs[i].Start(); busy {
		d.ends[i] = d.now + dur
	}
	g := d.engs[i].Gauges()
	d.maxWaiting, d.maxRunning = max(d.maxWaiting, g.Waiting), max(d.maxRunning, g.Running)
}

func compare(t *testing.T, want, got tokenTimes, n int) {
	t.Helper()
	worst, tokens := event.Time(0), 0
	for id := uint64(1); id <= uint64(n); id++ {
		w, g := want[id], got[id]
		if len(w) != len(g) {
			t.Errorf("request %d: %d tokens from the engine, %d from the simulator", id, len(g), len(w))
			continue
		}
		for k := range w {
			tokens++
			d := g[k] - w[k]
			if d < 0 {
				d = -d
			}
			worst = max(worst, d)
			if d > 2 {
				t.Errorf("request %d token %d: engine %d ns, simulator %d ns (%+d)", id, k+1, g[k], w[k], g[k]-w[k])
			}
		}
	}
	t.Logf("%d tokens of %d requests; largest difference %d ns", tokens, n, worst)
}

func newEngine(b sim.Batch) *engine.Engine {
	return engine.New(engine.Config{Profile: timing.Reference, Batch: engine.Batch{ChunkTokens: b.ChunkTokens, BudgetTokens: b.BudgetTokens,
		MaxSeqs: b.MaxSeqs, KVCapacityTokens: b.KVCapacityTokens}})
}

// One engine doing both phases (the aggregated arm): every token of every
// request at the simulator's time. Small budgets and caps make chunking,
// budget sharing, max_seqs, the KV-capacity wait and preemption (with
// recompute) all happen.
func TestAgreesWithSimulatorAggregated(t *testing.T) {
	for _, b := range []sim.Batch{
		sim.DefaultBatch,
		{ChunkTokens: 512, BudgetTokens: 1024, MaxSeqs: 6, KVCapacityTokens: 12000},
		{ChunkTokens: 1024, BudgetTokens: 4096, KVCapacityTokens: 9000},
	} {
		reqs := workload(1, 80)
		want, st := simTokens(t, "aggregated", 1, b, reqs)
		d := &driver{t: t, engs: []*engine.Engine{newEngine(b)}, ends: []event.Time{event.Never}, got: tokenTimes{}}
		d.run(reqs, func(d *driver, id uint64, r sim.Request) {
			if err := d.engs[0].AddPrefill(id, r.InputTokens, 0, r.OutputTokens); err != nil {
				t.Fatal(err)
			}
		})
		compare(t, want, d.got, len(reqs))
		if p := d.engs[0].Gauges().Preemptions; p != int64(st.Preemptions) {
			t.Errorf("batch %+v: %d preemptions in the engine, %d in the simulator", b, p, st.Preemptions)
		}
		if b.KVCapacityTokens > 0 && b.MaxSeqs == 0 && st.Preemptions == 0 {
			t.Errorf("batch %+v: no preemption: expected the KV capacity to bind", b)
		}
		t.Logf("batch %+v: %d preemptions", b, st.Preemptions)
		if b.MaxSeqs > 0 && (d.maxRunning != b.MaxSeqs || d.maxWaiting == 0) {
			t.Errorf("batch %+v: at most %d running and %d waiting: expected the caps to bind", b, d.maxRunning, d.maxWaiting)
		}
		if g := d.engs[0].Gauges(); !d.engs[0].Idle() || g.ContextTokens != 0 || g.Requests != 0 {
			t.Errorf("engine not empty at the end: %+v", g)
		}
	}
}

// Under heavy KV pressure (long answers, a capacity a few prompts wide)
// streams are preempted many times, some of them again while they
// recompute; engine and simulator still agree on every token.
func TestAgreesWithSimulatorUnderPreemption(t *testing.T) {
	for _, b := range []sim.Batch{
		{ChunkTokens: 2048, BudgetTokens: 16384, KVCapacityTokens: 4000},
		{ChunkTokens: 128, BudgetTokens: 256, KVCapacityTokens: 3000},
		{ChunkTokens: 512, BudgetTokens: 2048, MaxSeqs: 5, KVCapacityTokens: 2500},
	} {
		reqs := workload(3, 60)
		for i := range reqs {
			reqs[i].InputTokens = 30 + reqs[i].InputTokens%600
			reqs[i].OutputTokens = 50 + (reqs[i].OutputTokens*37)%400
		}
		want, st := simTokens(t, "aggregated", 1, b, reqs)
		d := &driver{t: t, engs: []*engine.Engine{newEngine(b)}, ends: []event.Time{event.Never}, got: tokenTimes{}}
		d.run(reqs, func(d *driver, id uint64, r sim.Request) {
			if err := d.engs[0].AddPrefill(id, r.InputTokens, 0, r.OutputTokens); err != nil {
				t.Fatal(err)
			}
		})
		compare(t, want, d.got, len(reqs))
		g := d.engs[0].Gauges()
		if g.Preemptions != int64(st.Preemptions) || st.Preemptions < 20 {
			t.Errorf("batch %+v: %d preemptions in the engine, %d in the simulator: expected the same, at least 20", b, g.Preemptions, st.Preemptions)
		}
		if !d.engs[0].Idle() || g.ContextTokens != 0 || g.RecomputeTokens != 0 || g.Requests != 0 {
			t.Errorf("engine not empty at the end: %+v", g)
		}
		t.Logf("batch %+v: %d preemptions", b, st.Preemptions)
	}
}

// 1P1D: engine 0 prefills (one-token legs), the KV moves in the flat
// 50 ms, engine 1 decodes; as the simulator's static:1P1D arm. With the
// tighter capacity the decode engine preempts and recomputes.
func TestAgreesWithSimulatorDisaggregated(t *testing.T) {
	for _, b := range []sim.Batch{
		{ChunkTokens: 1024, BudgetTokens: 4096, MaxSeqs: 16, KVCapacityTokens: 40000},
		{ChunkTokens: 1024, BudgetTokens: 4096, KVCapacityTokens: 10000},
	} {
		agreeDisaggregated(t, b)
	}
}

func agreeDisaggregated(t *testing.T, b sim.Batch) {
	reqs := workload(2, 80)
	want, st := simTokens(t, "static:1P1D", 2, b, reqs)
	d := &driver{t: t, engs: []*engine.Engine{newEngine(b), newEngine(b)}, ends: []event.Time{event.Never, event.Never}, got: tokenTimes{}}
	d.onEvt = func(d *driver, eng int, ev engine.Event) {
		if eng == 0 && ev.Kind == engine.PrefillDone {
			r := reqs[ev.ID-1]
			if r.OutputTokens > 1 {
				d.kv = append(d.kv, kvReady{at: d.now + event.Seconds(timing.FlatKV.Latency), id: ev.ID, in: r.InputTokens, out: r.OutputTokens})
			}
		}
	}
	d.run(reqs, func(d *driver, id uint64, r sim.Request) {
		if err := d.engs[0].AddPrefill(id, r.InputTokens, 0, 1); err != nil {
			t.Fatal(err)
		}
	})
	compare(t, want, d.got, len(reqs))
	p := d.engs[0].Gauges().Preemptions + d.engs[1].Gauges().Preemptions
	if p != int64(st.Preemptions) {
		t.Errorf("batch %+v: %d preemptions in the engines, %d in the simulator", b, p, st.Preemptions)
	}
	if b.KVCapacityTokens < 20000 && st.Preemptions == 0 {
		t.Errorf("batch %+v: no preemption: expected the KV capacity to bind", b)
	}
	t.Logf("batch %+v: %d preemptions", b, st.Preemptions)
}
