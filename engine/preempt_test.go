package engine

import (
	"fmt"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// The KV capacity binds when running streams grow: the stream admitted
// last is preempted (not the longest, not the first), frees its KV and
// waits at the front of the queue; once admitted again it computes its
// prompt and its answer so far again (T(prompt + produced), as chunks),
// samples its next token (no token comes twice) and decodes on.
func TestPreemptNewestThenRecompute(t *testing.T) {
	p := timing.Reference
	e := New(Config{Profile: p, Batch: Batch{KVCapacityTokens: 300}})
	// Three streams of 100 context tokens (99 prompt + 1 token): exactly full.
	for id := uint64(1); id <= 3; id++ {
		if err := e.AddDecode(id, 99, 1, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, evs := step(t, e); evs != "token:1#2 token:2#2 token:3#2" {
		t.Fatalf("first step %q", evs)
	}
	// 303 tokens > 300: request 3, admitted last, is preempted.
	d, evs := step(t, e)
	if evs != "token:1#3 token:2#3" || d != event.Seconds(p.Interval(202)) {
		t.Fatalf("after the preemption %q in %d ns, want requests 1 and 2 in I(202) = %d", evs, d, event.Seconds(p.Interval(202)))
	}
	if g := e.Gauges(); g.Preemptions != 1 || g.Running != 2 || g.Waiting != 1 || g.ContextTokens != 204 || g.PrefillTokens != 0 {
		t.Fatalf("gauges %+v: want 1 preemption, 2 running, 1 waiting without KV", g)
	}
	// 204 + 101 > 300: it waits (FCFS, no room).
	if _, evs := step(t, e); evs != "token:1#4 token:2#4" {
		t.Fatalf("request 3 joined without room: %q", evs)
	}
	e.Cancel(1)
	// Room again: it is admitted and recomputes its 99 + 2 tokens, then
	// samples token 3 (tokens 1 and 2 are not sent again).
	d, evs = step(t, e)
	if want := event.Seconds(p.Interval(103) + p.PrefillSpan(0, 101)); evs != "token:2#5 token:3#3" || d != want {
		t.Fatalf("recompute step %q in %d ns, want request 3's token 3 in I(103)+T(101) = %d", evs, d, want)
	}
	if g := e.Gauges(); g.Running != 2 || g.ContextTokens != 104+102 || g.RecomputeTokens != 0 || g.Recomputing != 0 {
		t.Fatalf("after the recompute %+v", g)
	}
	for !e.Idle() {
		step(t, e)
	}
	if g := e.Gauges(); g.Preemptions != 1 || g.ContextTokens != 0 {
		t.Fatalf("at the end %+v", g)
	}
}

// A stream preempted while it recomputes (it is the newest admitted)
// loses its recompute progress and starts over from token 0 when admitted
// again; the older stream keeps running, and no token comes twice.
func TestPreemptWhileRecomputing(t *testing.T) {
	p := timing.Reference
	e := New(Config{Profile: p, Batch: Batch{ChunkTokens: 16, BudgetTokens: 64, KVCapacityTokens: 200}})
	_ = e.AddDecode(1, 119, 1, 8) // 120 tokens
	_ = e.AddDecode(2, 2, 1, 100) // 3
	_ = e.AddDecode(3, 76, 1, 6)  // 77: 200, full
	step(t, e)                    // 203 tokens
	if _, evs := step(t, e); evs != "token:1#3 token:2#3" {
		t.Fatalf("request 3 not preempted: %q", evs)
	}
	e.Cancel(2)
	// 122 + 78 = 200: request 3 is admitted and recomputes its first chunk.
	d, evs := step(t, e)
	if g := e.Gauges(); evs != "token:1#4" || g.Recomputing != 1 || g.RecomputeTokens != 78 ||
		d != event.Seconds(p.PrefillSpan(0, 16)+p.Interval(122)) {
		t.Fatalf("recompute chunk 1: %q in %d ns, %+v", evs, d, g)
	}
	// 123 + 78 > 200: request 3, admitted after 1, is preempted again.
	if _, evs := step(t, e); evs != "token:1#5" {
		t.Fatalf("%q", evs)
	}
	if g := e.Gauges(); g.Preemptions != 2 || g.Recomputing != 0 || g.RecomputeTokens != 0 || g.Waiting != 1 {
		t.Fatalf("expected request 3 preempted while recomputing: %+v", g)
	}
	got := map[uint64][]int{}
	var alone []event.Time // iterations request 3 recomputes alone
	for !e.Idle() {
		d, busy := e.Start()
		if !busy {
			t.Fatal("engine idle with work")
		}
		g := e.Gauges()
		evs := e.Finish()
		if g.Recomputing == 1 && g.Running == 0 {
			alone = append(alone, d)
		}
		for _, ev := range evs {
			if ev.Kind == Token {
				got[ev.ID] = append(got[ev.ID], ev.K)
			}
		}
	}
	if s := fmt.Sprint(got[1], got[3]); s != "[6 7 8] [3 4 5 6]" {
		t.Errorf("tokens after the second preemption %s, want 1: 6..8, 3: 3..6 (none twice)", s)
	}
	// The recompute starts over: 78 tokens in chunks of 16, from 0.
	var want []event.Time
	for from := 0; from < 78; from += 16 {
		want = append(want, event.Seconds(p.PrefillSpan(from, min(from+16, 78))))
	}
	if fmt.Sprint(alone) != fmt.Sprint(want) {
		t.Errorf("recompute iterations %v, want T(78) chunked from 0: %v", alone, want)
	}
}
