package sim

import (
	"sort"
	"sync"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// Rehearser is the adaptive controller's rehearsal model (core.Rehearser,
// issue 10, twenty-second round): it keeps the last Window of arrivals as
// the router saw them (prompt length and prefix at arrival, answer length
// once the request ends) and replays them on this simulator, once per
// candidate split, each as a static split placing by Algorithm 1 with
// burst spill (core.Static with Alg1), the controller's own placement,
// or, for 0 prefill engines, as the aggregated arm (core.Aggregated), and
// for -k, as the hybrid fleet of k prefill engines (core.Hybrid).
// A replay from a time takes only the window's arrivals since (the
// controller's part of the window since a change of mix). An answer
// still running is given the mean length of the replayed ended answers.
// The window is repeated Tiles times, each copy Window later with its
// own prefixes, so that a queue the window leaves behind meets
// the same traffic again: a split that only keeps up for one window's
// length does not pass for one that keeps up.
//
// Each replay starts from an empty fleet and is deterministic, so a run
// with the rehearsal is as reproducible as one without.
//
// With Parallel above 1 the candidate splits are replayed at once, up to
// Parallel at a time, after the current split's replay (the live router
// sets it: the rehearsal runs on its owner goroutine, which places no
// request meanwhile). Each replay is the one it would be one after
// another, stopping at the same point, so the counts are the same.
type Rehearser struct {
	cfg    Config
	window event.Time
	tiles  int
	misses int         // the fewest delivered misses in the window worth a replay
	share  float64     // and the least share of the window's ended requests that missed
	arr    []rehearsed // by arrival, IDs increasing
	reqs   []Request
	folds  []event.StreamFold // one per replay running at once
	// Parallel is how many replays may run at once (0 or 1: one after
	// another).
	Parallel int
}

type rehearsed struct {
	at     event.Time
	id     event.RequestID
	input  int
	output int // 0 until the request ends
	missed bool
	group  int64
	prefix int
	// cgroup and ctokens: the group it leaves cached (core.Request's
	// CacheGroup, CacheTokens).
	cgroup  int64
	ctokens int
}

// NewRehearser returns a rehearser replaying on cfg's fleet (its profiles,
// KV, batching, prefix cache and SLO) with rc's window and repeats. A
// replay drains for at most two minutes after its last arrival.
func NewRehearser(cfg Config, rc core.RehearsalConfig) *Rehearser {
	cfg.DrainLimit = 120 * event.Second
	cfg.TokenHook = nil
	cfg.Pinned = nil
	cfg.Cordons = nil // the run's windows are at its own times, not a replay's
	return &Rehearser{cfg: cfg, window: rc.Window, tiles: max(1, rc.Tiles), misses: rc.MinGain, share: rc.Margin}
}

// Arrived implements core.Rehearser.
func (h *Rehearser) Arrived(now event.Time, r core.Request) {
	h.arr = append(h.arr, rehearsed{at: now, id: r.ID, input: max(1, r.InputTokens), group: r.PrefixGroup, prefix: r.PrefixTokens,
		cgroup: r.CacheGroup, ctokens: r.CacheTokens})
}

// Finished implements core.Rehearser.
func (h *Rehearser) Finished(r core.Request) {
	i := sort.Search(len(h.arr), func(i int) bool { return h.arr[i].id >= r.ID })
	if i < len(h.arr) && h.arr[i].id == r.ID {
		h.arr[i].output = max(1, r.OutputTokens)
		h.arr[i].missed = r.TTFT == event.Never || r.TTFT > h.cfg.SLO.TTFT || r.TPOT != event.Never && r.TPOT > h.cfg.SLO.TPOT
	}
}

// Qualified implements core.Rehearser.
func (h *Rehearser) Qualified(now, from event.Time, current int, others []int, gain func(int) int) (int, []int, int) {
	return h.qualified(now, from, current, others, gain, true)
}

// Replay implements core.Replayer: the window replayed on current and on
// each of others whether or not the fleet delivered it, every count exact.
func (h *Rehearser) Replay(now event.Time, current int, others []int) (int, []int, int) {
	return h.qualified(now, 0, current, others, nil, false)
}

func (h *Rehearser) qualified(now, from event.Time, current int, others []int, gain func(int) int, gate bool) (int, []int, int) {
	lo := sort.Search(len(h.arr), func(i int) bool { return h.arr[i].at >= now-h.window })
	h.arr = append(h.arr[:0], h.arr[lo:]...)
	lo = sort.Search(len(h.arr), func(i int) bool { return h.arr[i].at >= from })
	arr := h.arr[lo:]
	if len(arr) < 10 {
		return 0, nil, 0
	}
	sum, ended, missed := 0, 0, 0
	for _, a := range arr {
		if a.output > 0 {
			sum += a.output
			ended++
		}
		if a.missed {
			missed++
		}
	}
	if gate && (missed < h.misses || float64(missed) < h.share*float64(ended)) {
		return 0, nil, 0 // the fleet delivers the window: nothing to win
	}
	mean := 1
	if ended > 0 {
		mean = max(1, sum/ended)
	}
	start := arr[0].at
	span := max(now-start, event.Second)
	h.reqs = h.reqs[:0]
	for t := range h.tiles {
		for _, a := range arr {
			q := Request{At: a.at - start + event.Time(t)*span, InputTokens: a.input, OutputTokens: a.output,
				PrefixGroup: a.group, PrefixTokens: a.prefix, CacheGroup: a.cgroup, CacheTokens: a.ctokens}
			if q.OutputTokens == 0 {
				q.OutputTokens = mean
			}
			if q.PrefixGroup != 0 {
				q.PrefixGroup += int64(t) << 40 // each copy its own documents
			}
			if q.CacheGroup != 0 {
				q.CacheGroup += int64(t) << 40
			}
			h.reqs = append(h.reqs, q)
		}
	}
	h.grow(1 + min(len(others), max(0, h.Parallel-1)))
	cur, err := h.replay(&h.folds[0], current, -1)
	if err != nil {
		return 0, nil, 0
	}
	// Stop a replay once more fail than the split may and still gain.
	limit := -1
	if gain != nil {
		if limit = len(h.reqs) - (cur + gain(len(h.reqs))); limit < 0 {
			// No split can gain that much: 0 is below the bar.
			return cur, make([]int, len(others)), len(h.reqs)
		}
	}
	counts := make([]int, len(others))
	if h.Parallel <= 1 || len(others) < 2 {
		for i, p := range others {
			if counts[i], err = h.replay(&h.folds[0], p, limit); err != nil {
				return 0, nil, 0
			}
		}
		return cur, counts, len(h.reqs)
	}
	// The others at once, each on a fold of its own, up to Parallel.
	errs := make([]error, len(others))
	next := make(chan int, len(others))
	for i := range others {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for w := range min(len(others), h.Parallel) {
		wg.Go(func() {
			for i := range next {
				counts[i], errs[i] = h.replay(&h.folds[w], others[i], limit)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, nil, 0
		}
	}
	return cur, counts, len(h.reqs)
}

// grow makes at least k folds.
func (h *Rehearser) grow(k int) {
	for len(h.folds) < k {
		h.folds = append(h.folds, event.StreamFold{})
	}
}

// stopRehearsal ends a replay that can no longer gain.
type stopRehearsal struct{}

// replay runs the rehearsal's requests on split p with fold and counts
// those that qualify; with maxFail >= 0 it stops once more than maxFail
// have failed, returning a count below len(h.reqs) - maxFail. It only
// reads the Rehearser, so several run at once on folds of their own.
func (h *Rehearser) replay(fold *event.StreamFold, p, maxFail int) (ok int, err error) {
	fold.Reset()
	failed := 0
	slo := h.cfg.SLO
	fold.End = func(row *event.Row) {
		if event.Qualify(row, slo) == event.CheckOK {
			ok++
			return
		}
		if failed++; maxFail >= 0 && failed > maxFail {
			panic(stopRehearsal{})
		}
	}
	var ctrl core.Controller = &core.Static{Prefill: p, Alg1: true}
	if p == 0 {
		ctrl = core.Aggregated{} // aggregated serving (core.Rehearser)
	} else if p < 0 {
		ctrl = &core.Hybrid{Prefill: -p} // hybrid serving (core.Rehearser)
	}
	s, err := New(h.cfg, ctrl, h.reqs, fold)
	if err != nil {
		return 0, err
	}
	stopped := false
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(stopRehearsal); !ok {
					panic(v)
				}
				stopped = true
			}
		}()
		_, err = s.Run()
	}()
	if stopped {
		return len(h.reqs) - maxFail - 1, nil
	}
	if err != nil {
		return 0, err
	}
	if err := fold.Err(); err != nil {
		return 0, err
	}
	return ok, nil
}
