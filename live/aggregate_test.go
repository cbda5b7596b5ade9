package live

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// aggThenSplit is a rehearser rating aggregated serving (0 prefill
// engines) best until flip, and one prefill engine best after it. The
// router calls it on its owner goroutine only.
type aggThenSplit struct {
	flip  event.Time
	calls int
}

func (f *aggThenSplit) Arrived(event.Time, core.Request) {}
func (f *aggThenSplit) Finished(core.Request)            {}
func (f *aggThenSplit) Qualified(now event.Time, _ event.Time, current int, others []int, _ func(int) int) (int, []int, int) {
	f.calls++
	best := 1
	if now < f.flip {
		best = 0
	}
	score := func(q int) int {
		if q == best {
			return 100
		}
		return 0
	}
	c := make([]int, len(others))
	for i, q := range others {
		c[i] = score(q)
	}
	return score(current), c, 100
}

// The live router follows the adaptive controller into aggregated
// serving and back (issue 10, twenty-fifth round): every engine is
// relabelled mixed, each request placed then runs as one ordinary request
// on one engine (no KV handoff), the fleet returns to a split when the
// rehearsal says so, and the journal keeps every invariant through both
// changes.
func TestRouterFollowsAggregatedSpell(t *testing.T) {
	a := &core.Adaptive{Cfg: core.DefaultAdaptive}
	a.Cfg.Step = 50 * event.Millisecond
	a.Cfg.Rehearsal.Step = 50 * event.Millisecond
	a.Cfg.Rehearsal.Dwell = 300 * event.Millisecond
	a.Cfg.Rehearsal.Confirmations = 1
	f := &aggThenSplit{flip: 1500 * event.Millisecond}
	a.Rehearser = f
	r := startRig(t, rigOpts{n: 3, ctrl: a, stub: stub.Options{TimeScale: zero()}})
	c := openai.NewClient(option.WithBaseURL(r.url+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; i < 150 && time.Now().Before(deadline); i++ {
		_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "stub",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("a prompt for the fleet")},
			MaxTokens: openai.Int(4)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Millisecond)
	}
	r.stop()
	recs := r.jr.records()
	rows := checkJournal(t, recs)
	if len(rows) == 0 {
		t.Fatal("no request served")
	}
	mixed, enters, leaves := 0, 0, 0
	var prefillOn = map[event.RequestID]event.Instance{}
	single := 0
	for i := range recs {
		x := &recs[i]
		switch x.Kind {
		case event.KindRoleMove:
			if x.Opening() {
				continue
			}
			if x.To == event.RoleMixed {
				if mixed++; mixed == 3 {
					enters++
				}
			} else if x.From == event.RoleMixed {
				if mixed--; mixed == 0 {
					leaves++
				}
			}
		case event.KindPrefillStart:
			if mixed == 3 {
				prefillOn[x.Req] = x.Inst
			}
		case event.KindDecodeStart:
			if on, ok := prefillOn[x.Req]; ok && mixed == 3 {
				if x.Inst != on || x.Cause == event.CauseCrossed {
					t.Errorf("request %d ran its prompt on %d while aggregated but decodes on %d", x.Req, on, x.Inst)
				}
				single++
			}
		}
	}
	if enters != 1 || leaves != 1 {
		t.Fatalf("aggregated %d times, left %d times: want once each (rehearsals: %d)", enters, leaves, f.calls)
	}
	if single == 0 {
		t.Error("no request served while the fleet was aggregated")
	}
}
