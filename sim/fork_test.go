package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// burstyTrace draws n requests arriving in bursts (up to four at the same
// instant), a third of them sharing one of four prefixes.
func burstyTrace(seed uint64, n int, rate float64) []Request {
	rng := rand.New(rand.NewPCG(seed, 7))
	reqs := make([]Request, 0, n)
	t := 0.0
	for len(reqs) < n {
		t += rng.ExpFloat64() / rate * 2.5
		for k := 1 + rng.IntN(4); k > 0 && len(reqs) < n; k-- {
			r := Request{At: event.Seconds(t), InputTokens: 50 + rng.IntN(3000), OutputTokens: 1 + rng.IntN(300)}
			if rng.IntN(3) == 0 {
				r.PrefixGroup, r.PrefixTokens = 1+int64(rng.IntN(4)), 40
			}
			reqs = append(reqs, r)
		}
	}
	return reqs
}

// stepsOf is the schedule of splits per window of w: a step where the
// split changes (as the hindsight search builds them).
func stepsOf(splits []int, w event.Time) []core.ScheduleStep {
	var steps []core.ScheduleStep
	for k, p := range splits {
		if k == 0 || p != splits[k-1] {
			steps = append(steps, core.ScheduleStep{At: event.Time(k) * w, Prefill: p})
		}
	}
	return steps
}

// replayWhole runs steps from the start and returns its records and stats.
func replayWhole(t *testing.T, cfg Config, reqs []Request, steps []core.ScheduleStep) ([]event.Record, Stats) {
	t.Helper()
	log := &recordLog{}
	s, err := New(cfg, &core.Scheduled{Arm: "oracle", Steps: steps}, reqs, log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	return *log, st
}

// A run forked at a window start and driven on by a schedule that differs
// from there on is the run of that schedule from the start, record for
// record: every tick case (the pending tick moved, dropped or added), with
// and without KV capacity, prefix caching and bursts; and the run it was
// forked from goes on unchanged.
func TestForkReplaysAsFromTheStart(t *testing.T) {
	const n, windows = 6, 12
	w := 20 * event.Second
	type setup struct {
		name  string
		cfg   func() Config
		rate  float64
		turns bool // prompts in conversations: each leaves a group the next extends
	}
	setups := []setup{
		{"plain", func() Config { return refConfig(n) }, 3, false},
		{"overloaded", func() Config { return refConfig(n) }, 9, false},
		{"kv-capacity", func() Config {
			c := refConfig(n)
			c.Batch.KVCapacityTokens = 20000
			return c
		}, 4, false},
		{"prefix-cache", func() Config {
			c := refConfig(n)
			c.Cache = DefaultPrefixCache
			return c
		}, 4, false},
		{"prefix-cache-turns", func() Config {
			c := refConfig(n)
			c.Cache = DefaultPrefixCache
			c.Cache.CapacityTokens = 3000 // small: entries that extend others are evicted
			return c
		}, 4, true},
	}
	moved, dropped, added := 0, 0, 0
	for si, su := range setups {
		cfg := su.cfg()
		reqs := burstyTrace(uint64(si+1), 600, su.rate)
		if su.turns {
			turn := map[int]int{}
			for i := range reqs {
				c := i % 7 // seven conversations
				k := turn[c]
				turn[c]++
				r := &reqs[i]
				r.InputTokens = max(r.InputTokens, 64*(k+2))
				if k > 0 {
					r.PrefixGroup, r.PrefixTokens = int64(1000*c+k), 64*k // the turn before's
				}
				r.CacheGroup, r.CacheTokens = int64(1000*c+k+1), 64*(k+1)
			}
		}
		rng := rand.New(rand.NewPCG(uint64(si), 3))
		for trial := range 12 {
			a := make([]int, windows)
			for k := range a {
				a[k] = 1 + rng.IntN(n-1)
				if k > 0 && rng.IntN(2) == 0 {
					a[k] = a[k-1] // long stretches: ticks pending far ahead
				}
			}
			k := 1 + rng.IntN(windows-1)
			b := slices.Clone(a)
			for b[k] == a[k] {
				b[k] = 1 + rng.IntN(n-1)
			}
			if rng.IntN(2) == 0 {
				b[k] = b[k-1] // no step at k: the tick may be dropped
			}
			for j := k + 1; j < windows; j++ {
				if rng.IntN(3) == 0 {
					b[j] = 1 + rng.IntN(n-1)
				}
			}
			sa, sb := stepsOf(a, w), stepsOf(b, w)
			name := fmt.Sprintf("%s/%d", su.name, trial)
			wantA, statsA := replayWhole(t, cfg, reqs, sa)
			wantB, statsB := replayWhole(t, cfg, reqs, sb)

			logA := &recordLog{}
			ctrlA := &core.Scheduled{Arm: "oracle", Steps: sa}
			s, err := New(cfg, ctrlA, reqs, logA)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Advance(event.Time(k) * w); err != nil {
				t.Fatal(err)
			}
			ctrlB, err := ctrlA.Follow(sb)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			pending := s.tickAt
			logB := new(recordLog)
			*logB = slices.Clone(*logA)
			f, err := s.Fork(logB, ctrlB)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			switch {
			case pending != event.Never && f.tickAt != event.Never && pending != f.tickAt:
				moved++
			case pending != event.Never && f.tickAt == event.Never:
				dropped++
			case pending == event.Never && f.tickAt != event.Never:
				added++
			}
			gotB, err := f.Run()
			if err != nil {
				t.Fatal(err)
			}
			gotA, err := s.Run()
			if err != nil {
				t.Fatal(err)
			}
			if gotB != statsB || !slices.Equal(*logB, wantB) {
				t.Errorf("%s: forked at window %d, %v -> %v: stats %+v, %d records; from the start %+v, %d records (first difference at %d)",
					name, k, a, b, gotB, len(*logB), statsB, len(wantB), firstDiff(*logB, wantB))
			}
			if gotA != statsA || !slices.Equal(*logA, wantA) {
				t.Errorf("%s: the run forked from changed: stats %+v, from the start %+v (first difference at %d)", name, gotA, statsA, firstDiff(*logA, wantA))
			}
		}
	}
	if moved == 0 || dropped == 0 || added == 0 {
		t.Errorf("tick cases covered: moved %d, dropped %d, added %d: expected each", moved, dropped, added)
	}
}

func firstDiff(a, b []event.Record) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Fork refuses what it cannot copy exactly.
func TestForkRefuses(t *testing.T) {
	cfg := refConfig(4)
	reqs := burstyTrace(1, 50, 2)
	steps := []core.ScheduleStep{{At: 0, Prefill: 2}}
	s, err := New(cfg, &core.Scheduled{Arm: "oracle", Steps: steps}, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(nil, &core.Scheduled{Arm: "oracle", Steps: steps}); err == nil {
		t.Error("fork before Advance: no error")
	}
	if _, err := s.Advance(10 * event.Second); err != nil {
		t.Fatal(err)
	}
	// A schedule asking for a tick in the past: its decisions before the
	// pause were not the run's.
	if _, err := s.Fork(nil, &core.Scheduled{Arm: "oracle", Steps: []core.ScheduleStep{{At: 0, Prefill: 2}, {At: 5 * event.Second, Prefill: 3}}}); err == nil {
		t.Error("fork with a tick before the pause: no error")
	}
	if _, err := s.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(nil, &core.Scheduled{Arm: "oracle", Steps: steps}); err == nil {
		t.Error("fork after the run ended: no error")
	}
	if _, err := s.Run(); err == nil {
		t.Error("a second Run: no error")
	}
	src := &funcSource{next: func(r *Request) bool { *r = Request{At: event.Second, InputTokens: 10, OutputTokens: 5}; return false }}
	s2, err := NewStream(cfg, &core.Scheduled{Arm: "oracle", Steps: steps}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Advance(event.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Fork(nil, &core.Scheduled{Arm: "oracle", Steps: steps}); err == nil {
		t.Error("fork of a streamed source: no error")
	}
}

// Every request Doomed counts at a pause ends without qualifying: late
// for its first token, past its TPOT budget, or cut at its cap; and each
// of the three is met (the hindsight search's screen compares runs by it).
func TestDoomedNeverQualify(t *testing.T) {
	const n = 6
	w := 10 * event.Second
	setups := []struct {
		name       string
		ttft, tpot event.Time
		rate       float64
	}{
		{"overloaded", 2 * event.Second, 125 * event.Millisecond, 9},
		{"loaded", 2 * event.Second, 125 * event.Millisecond, 5},
		{"near-capacity", 3 * event.Second, 125 * event.Millisecond, 6},
		{"tight-tpot", 10 * event.Second, 35 * event.Millisecond, 4},
	}
	kinds := map[string]int{}
	for si, su := range setups {
		cfg := refConfig(n)
		cfg.SLO.TTFT, cfg.SLO.TPOT = su.ttft, su.tpot
		reqs := burstyTrace(uint64(si+11), 800, su.rate)
		for i := range reqs {
			if i%7 == 0 {
				reqs[i].OutputCap = 1 + reqs[i].OutputTokens/2
			}
		}
		var fold event.Fold
		s, err := New(cfg, &core.Scheduled{Arm: "oracle", Steps: stepsOf([]int{2, 3, 4, 2, 1, 3}, w)}, reqs, &fold)
		if err != nil {
			t.Fatal(err)
		}
		doomed := map[int32]string{}
		for k := 1; k < 40; k++ {
			at := event.Time(k) * 5 * event.Second
			more, err := s.Advance(at)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
			count := 0
			s.eachDoomed(at, cfg.SLO, func(i int32) {
				count++
				st := s.state(i)
				switch {
				case st.capped:
					doomed[i] = "capped"
				case st.firstAt == 0:
					doomed[i] = "ttft"
				default:
					doomed[i] = "tpot"
				}
			})
			if got := s.Doomed(at, cfg.SLO); got != count {
				t.Fatalf("%s at %v: Doomed %d, its requests %d", su.name, at, got, count)
			}
		}
		if _, err := s.Run(); err != nil {
			t.Fatal(err)
		}
		rows := fold.Rows()
		for i, why := range doomed {
			kinds[why]++
			if c := event.Qualify(&rows[i], cfg.SLO); c == event.CheckOK {
				t.Errorf("%s: request %d counted doomed (%s) qualified: TTFT %v, TPOT %v", su.name, i+1, why, rows[i].TTFT(), rows[i].TPOT())
			}
		}
	}
	for _, k := range []string{"ttft", "tpot", "capped"} {
		if kinds[k] == 0 {
			t.Errorf("no request doomed by %s: the test does not reach that case (%v)", k, kinds)
		}
	}
}
