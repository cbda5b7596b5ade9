package core

import (
	"math/rand/v2"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// The fleet's running totals (ScoreSplit's) stay equal to the totals
// counted afresh through random facts (driveRandom checks them each step).
func TestFleetTotalsFollowFacts(t *testing.T) {
	for _, arm := range []string{"adaptive", "arrow", "dynamo"} {
		driveRandom(t, arm, 12, 4, 3000, false)
	}
}

// The placement index chooses exactly what Algorithm 1's scan chooses:
// random facts (arrivals, prefills done, endings, cancellations, engines
// down and up, re-placements, observations, ticks) drive 40-instance
// fleets under every controller that places with Algorithm 1, with every
// indexed placement, and every burst spill's choice of idle decode engine,
// checked against the scan (checkIndex panics on a difference): Arrow
// §5.3's Algorithm 1 picks by its lexicographic cost pairs either way.
func TestPlacementIndexMatchesScan(t *testing.T) {
	checkIndex = true
	defer func() { checkIndex = false }()
	offline := offlineChecks
	for _, arm := range []string{"adaptive", "arrow", "planner", "coldswap", "static:10P30D/alg1"} {
		spills := spillChecks
		for seed := uint64(1); seed <= 3; seed++ {
			before := indexChecks
			driveRandom(t, arm, 40, seed, 3000, false)
			if indexChecks-before < 100 {
				t.Errorf("%s seed %d: only %d placements used the index", arm, seed, indexChecks-before)
			}
		}
		// The arms that spill (adaptive and static/alg1) looked for an
		// idle decode engine through the index.
		if spilling := arm == "adaptive" || arm == "static:10P30D/alg1"; spilling && spillChecks-spills < 20 {
			t.Errorf("%s: only %d spill choices used the index", arm, spillChecks-spills)
		}
	}
	// With prefix caching the index answers too, the one engine holding a
	// prompt's prefix weighed after its walk (weighCached), for
	// placements and burst spill alike.
	for _, arm := range []string{"adaptive", "arrow", "static:10P30D/alg1"} {
		spills, before := spillChecks, indexChecks
		for seed := uint64(1); seed <= 3; seed++ {
			driveRandom(t, arm, 40, seed, 3000, true)
		}
		if indexChecks-before < 300 {
			t.Errorf("%s with prefix caching: only %d placements used the index", arm, indexChecks-before)
		}
		if arm != "arrow" && spillChecks-spills < 20 {
			t.Errorf("%s with prefix caching: only %d spill choices used the index", arm, spillChecks-spills)
		}
	}
	// coldswap's moves take engines offline for minutes: the index
	// answered then too, the offline engines out of its trees.
	if offlineChecks-offline < 100 {
		t.Errorf("only %d placements used the index with an engine offline", offlineChecks-offline)
	}
}

// The least-loaded index (argindex.go) answers as the scan does, on the
// static splits and aggregated serving, under the same random facts
// (engines down and up, re-placements, cancellations): checkIndex panics
// on a difference.
func TestLeastLoadedIndexMatchesScan(t *testing.T) {
	checkIndex = true
	defer func() { checkIndex = false }()
	for _, arm := range []string{"static:10P30D", "static:30P10D", "aggregated"} {
		for seed := uint64(1); seed <= 3; seed++ {
			before := argChecks
			driveRandom(t, arm, 40, seed, 3000, false)
			if argChecks-before < 100 {
				t.Errorf("%s seed %d: only %d placements used the index", arm, seed, argChecks-before)
			}
		}
	}
}

type live struct {
	r     Request
	stage Stage
}

// driveRandom plays steps random facts on a fleet of n engines under arm;
// with prefix, prompts share prefixes (a few groups) and the core prices
// them (PrefixAware), some with an engine's own report of cached tokens.
func driveRandom(t *testing.T, arm string, n int, seed uint64, steps int, prefix bool) {
	t.Helper()
	ctrl, err := NewController(arm, n)
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]timing.Profile, n)
	for i := range ps {
		ps[i] = timing.Reference
	}
	c, err := New(Config{Profiles: ps, SLO: event.SLO{TTFT: 2 * event.Second, TPOT: 60 * event.Millisecond}, PrefixAware: prefix}, ctrl)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 9))
	now := event.Time(0)
	byID := map[event.RequestID]*live{}
	var ids []event.RequestID
	next := event.RequestID(1)
	down := event.NoInstance
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s seed %d: %v", arm, seed, err)
		}
	}
	apply := func() {
		for _, d := range c.Ready().Decisions {
			l := byID[d.Req]
			switch d.Kind {
			case PlacePrefill:
				l.r.PrefillInst, l.stage = d.Inst, StagePrefill
			case PlaceDecode:
				l.r.DecodeInst, l.stage = d.Inst, StageDecode
				l.r.ContextTokens = int64(l.r.InputTokens) + 1
			case Refuse, Fail, Expire:
				delete(byID, d.Req)
			case Queue:
				l.stage = StageQueued
			}
		}
	}
	pick := func(stage Stage) *live {
		for k := 0; k < 8 && len(ids) > 0; k++ {
			j := rng.IntN(len(ids))
			if l, ok := byID[ids[j]]; ok && l.stage == stage {
				return l
			}
			if _, ok := byID[ids[j]]; !ok {
				ids[j] = ids[len(ids)-1]
				ids = ids[:len(ids)-1]
			}
		}
		return nil
	}
	for s := 0; s < steps; s++ {
		now += event.Time(rng.IntN(int(50 * event.Millisecond)))
		switch k := rng.IntN(100); {
		case k < 40:
			r := Request{ID: next, InputTokens: 50 + rng.IntN(8000), PrefillInst: event.NoInstance, DecodeInst: event.NoInstance}
			if prefix {
				switch rng.IntN(4) {
				case 0: // no shared prefix
				case 1: // an engine's report: cached on one engine
					r.CachedOn, r.CachedTokens = event.Instance(rng.IntN(n)), rng.IntN(r.InputTokens+1)
				default: // one of a few shared prefixes, up to the whole prompt
					r.PrefixGroup, r.PrefixTokens = int64(1+rng.IntN(6)), rng.IntN(r.InputTokens+1)
				}
			}
			next++
			byID[r.ID] = &live{r: r}
			ids = append(ids, r.ID)
			must(c.Arrive(now, r))
		case k < 65:
			if l := pick(StagePrefill); l != nil {
				must(c.PrefillDone(now, l.r))
			}
		case k < 85:
			if l := pick(StageDecode); l != nil {
				l.r.OutputTokens, l.r.TTFT, l.r.TPOT = 1+rng.IntN(300), event.Second, event.Never
				l.r.ContextTokens += int64(l.r.OutputTokens)
				must(c.Finished(now, l.r.DecodeInst, l.r))
				delete(byID, l.r.ID)
			}
		case k < 89:
			if l := pick(StagePrefill); l != nil {
				must(c.Cancel(now, l.r, StagePrefill))
				delete(byID, l.r.ID)
			}
		case k < 91:
			if l := pick(StageDecode); l != nil {
				must(c.Replace(now, l.r, StageDecode, l.r.DecodeInst, event.CauseEngineDown))
				l.r.PrefillInst, l.r.DecodeInst, l.stage = event.NoInstance, event.NoInstance, StageQueued
			}
		case k < 93:
			// At most one engine down at a time, back on the next pick.
			if down == event.NoInstance {
				down = event.Instance(rng.IntN(n))
				must(c.EngineDown(now, down, event.CauseEngineDown))
			} else {
				must(c.EngineUp(now, down, uint64(s)))
				down = event.NoInstance
			}
		case k < 96:
			i := event.Instance(rng.IntN(n))
			must(c.Observe(now, i, Observation{DecodeIters: 3, DecodeSeconds: 0.05 * rng.Float64(), DecodeTokens: int64(rng.IntN(30000))}))
		default:
			must(c.Tick(now))
		}
		apply()
		if s%7 == 0 { // changes pile up between readings
			checkFleetTotals(t, &c.v)
		}
	}
}

// checkFleetTotals fails unless the core's running fleet totals are the
// totals counted afresh.
func checkFleetTotals(t *testing.T, v *View) {
	t.Helper()
	var work exact
	var resident, pending int64
	holders := 0
	for i := range v.inst {
		work = work.plus(exactOf(v.inst[i].PrefillWork))
		resident += v.inst[i].DecodeTokens
		pending += v.inst[i].PrefillTokens
		if v.inst[i].DecodeTokens > 0 {
			holders++
		}
	}
	v.fleet.sync(v.inst)
	if f := &v.fleet; f.work != work || f.resident != resident || f.holders != holders || f.pending != pending {
		t.Fatalf("fleet totals: work %v, resident %d, holders %d, pending %d; counted %v, %d, %d, %d",
			f.work.float(), f.resident, f.holders, f.pending, work.float(), resident, holders, pending)
	}
}
