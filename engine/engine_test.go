package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

func ref() *Engine { return New(Config{Profile: timing.Reference}) }

func str(evs []Event) string {
	var b []string
	for _, e := range evs {
		s := fmt.Sprintf("%s:%d", e.Kind, e.ID)
		if e.Kind == Token {
			s += fmt.Sprintf("#%d", e.K)
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

// step runs one iteration and returns its duration and events.
func step(t *testing.T, e *Engine) (event.Time, string) {
	t.Helper()
	d, busy := e.Start()
	if !busy {
		t.Fatal("engine idle")
	}
	return d, str(e.Finish())
}

func TestPrefillOnlyLeg(t *testing.T) {
	e := ref()
	if err := e.AddPrefill(1, 1000, 0, 1); err != nil {
		t.Fatal(err)
	}
	d, evs := step(t, e)
	if want := event.Seconds(timing.Reference.Prefill(1000)); d != want {
		t.Errorf("prefill took %d ns, want T(1000) = %d", d, want)
	}
	if evs != "prefill_done:1 token:1#1 done:1" {
		t.Errorf("events %q", evs)
	}
	if !e.Idle() {
		t.Error("a prefill-only leg stayed")
	}
	if _, busy := e.Start(); busy {
		t.Error("idle engine started an iteration")
	}
}

func TestLocalDecodeAndCache(t *testing.T) {
	e := ref()
	_ = e.AddPrefill(1, 100, 60, 3)
	d, evs := step(t, e)
	p := timing.Reference
	if want := event.Seconds(p.PrefillSpan(60, 100)); d != want {
		t.Errorf("cached prefill %d ns, want T(100)-T(60) = %d", d, want)
	}
	if evs != "prefill_done:1 token:1#1" {
		t.Errorf("events %q", evs)
	}
	if g := e.Gauges(); g.Waiting != 1 || g.PrefillTokens != 101 {
		t.Errorf("after prefill %+v", g)
	}
	d, evs = step(t, e)
	if want := event.Seconds(p.Interval(101)); d != want || evs != "token:1#2" {
		t.Errorf("decode 1: %d ns %q, want %d", d, evs, want)
	}
	if g := e.Gauges(); g.Running != 1 || g.ContextTokens != 102 {
		t.Errorf("running %+v", g)
	}
	_, evs = step(t, e)
	if evs != "token:1#3 done:1" || !e.Idle() || e.Gauges().ContextTokens != 0 {
		t.Errorf("last step %q, gauges %+v", evs, e.Gauges())
	}
	// A fully cached prompt still computes its last token.
	_ = e.AddPrefill(2, 50, 50, 1)
	if d, _ := step(t, e); d != event.Seconds(p.PrefillSpan(49, 50)) {
		t.Errorf("fully cached prompt: %d ns", d)
	}
}

func TestChunkingAndBudget(t *testing.T) {
	e := New(Config{Profile: timing.Reference, Batch: Batch{ChunkTokens: 100, BudgetTokens: 150}})
	_ = e.AddPrefill(1, 250, 0, 1)
	_ = e.AddPrefill(2, 50, 0, 1)
	_ = e.AddPrefill(3, 40, 0, 1)
	if g := e.Gauges(); g.Prefill != 3 || g.Started != 0 {
		t.Errorf("before the first iteration %+v: expected 3 prompts, none begun", g)
	}
	var all []string
	for i := 0; !e.Idle(); i++ {
		e.Start()
		if g := e.Gauges(); i == 0 && (g.Prefill != 3 || g.Started != 2) {
			// The budget takes #1's first chunk and #2; #3 waits.
			t.Errorf("during the first iteration %+v: expected 3 prompts, 2 begun", g)
		}
		all = append(all, str(e.Finish()))
	}
	// 1: 100 of #1 + 50 of #2 -> #2 done; 2: 100 more of #1 + #3 -> #3
	// done; 3: the last 50 of #1.
	if got := strings.Join(all, " | "); got != "prefill_done:2 token:2#1 done:2 | prefill_done:3 token:3#1 done:3 | prefill_done:1 token:1#1 done:1" {
		t.Errorf("iterations: %s", got)
	}
}

func TestAddDecodeAndCapacity(t *testing.T) {
	e := New(Config{Profile: timing.Reference, Batch: Batch{KVCapacityTokens: 150, MaxSeqs: 8}})
	if err := e.AddDecode(1, 100, 1, 3); err != nil {
		t.Fatal(err)
	}
	_ = e.AddDecode(2, 100, 1, 2)
	_, evs := step(t, e)
	if evs != "token:1#2" || e.Gauges().Waiting != 1 {
		t.Errorf("capacity let both in: %q %+v", evs, e.Gauges())
	}
	_, evs = step(t, e)
	if evs != "token:1#3 done:1" {
		t.Errorf("%q", evs)
	}
	_, evs = step(t, e)
	if evs != "token:2#2 done:2" || !e.Idle() {
		t.Errorf("%q", evs)
	}
	for _, bad := range [][3]int{{0, 1, 2}, {10, 2, 2}, {10, -1, 3}} {
		if e.AddDecode(9, bad[0], bad[1], bad[2]) == nil {
			t.Errorf("AddDecode%v accepted", bad)
		}
	}
	if e.AddPrefill(9, 0, 0, 1) == nil || e.AddPrefill(9, 5, 0, 0) == nil {
		t.Error("bad AddPrefill accepted")
	}
	_ = e.AddPrefill(9, 5, 0, 1)
	if e.AddPrefill(9, 5, 0, 1) == nil || e.AddDecode(9, 5, 1, 2) == nil {
		t.Error("duplicate id accepted")
	}
}

func TestCancelEverywhere(t *testing.T) {
	e := New(Config{Profile: timing.Reference, Batch: Batch{ChunkTokens: 100}})
	_ = e.AddPrefill(1, 300, 0, 5) // prefilling
	_ = e.AddDecode(2, 50, 1, 9)   // will run
	_ = e.AddDecode(3, 50, 1, 9)
	if _, busy := e.Start(); !busy {
		t.Fatal("idle")
	}
	// During the iteration: cancel a running stream and the prompt.
	if !e.Cancel(2) || !e.Cancel(1) || e.Cancel(1) || e.Cancel(42) {
		t.Fatal("Cancel results")
	}
	if evs := str(e.Finish()); evs != "token:3#2" {
		t.Errorf("after cancels: %q", evs)
	}
	g := e.Gauges()
	if g.Running != 1 || g.Prefill != 0 || g.ContextTokens != 52 || g.Requests != 1 {
		t.Errorf("gauges %+v", g)
	}
	_ = e.AddDecode(4, 10, 1, 3) // waiting
	if !e.Cancel(4) || e.Gauges().Waiting != 0 {
		t.Error("cancel a waiting stream")
	}
	e.Cancel(3)
	if !e.Idle() || e.Gauges().ContextTokens != 0 {
		t.Errorf("not empty: %+v", e.Gauges())
	}
	if e.Finish() != nil {
		t.Error("Finish without an iteration")
	}
}

// Decode-only iterations with a stable batch telescope to the closed form.
func TestDecodeSpanClosedForm(t *testing.T) {
	e := ref()
	_ = e.AddDecode(1, 1000, 1, 200)
	_ = e.AddDecode(2, 3000, 1, 200)
	var total event.Time
	for j := 1; j <= 150; j++ {
		d, _ := step(t, e)
		total += d
	}
	p := timing.Reference
	a := p.Slope*4002 + p.Intercept
	want := event.Seconds(150*a + p.Slope*2*150*149/2)
	if total != want {
		t.Errorf("150 iterations: %d ns, closed form %d ns", total, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Profile: timing.Reference, Batch: Batch{ChunkTokens: 1, BudgetTokens: 1}}).Validate(); err == nil {
		t.Error("budget 1 accepted")
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted a zero profile")
		}
	}()
	New(Config{})
}
