package live

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// Burst spill served live (core.SpillConfig): on one prefill and one
// decode engine with a 1 s TTFT SLO and 600-token prompts priced at 0.6 s,
// the second of three prompts sent together cannot start in time on the
// prefill engine, so the idle decode engine absorbs it: it runs there as
// one ordinary request (no KV crosses), journaled as an admit with cause
// spilled, and decodes on the same engine. The third fits nowhere within
// 0.8 s and waits on the prefill engine. Every request ends exactly once;
// /metrics counts the spill.
func TestBurstSpillLive(t *testing.T) {
	spec := testFleetWith(t, 2, "{a: 0, b: 1.0e-3, c: 0.0005, slope: 1.0e-7, intercept: 0.002}", "{ttft: 1s, tpot: 100ms}")
	scale := 0.1 // the stubs run the profile ten times faster than the core prices it
	ctrl := &core.Scheduled{Arm: "spill-test", Steps: []core.ScheduleStep{{At: 0, Prefill: 1}}}
	r := startRigSpec(t, spec, rigOpts{ctrl: ctrl, stub: stub.Options{TimeScale: &scale}})
	prompt := strings.TrimSpace(strings.Repeat("word ", 600))
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"`+prompt+`","max_tokens":8,"min_tokens":8,"stream":true}`, nil)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
		time.Sleep(5 * time.Millisecond) // arrival order 1, 2, 3; each admitted before the next
	}
	wg.Wait()
	if v := metricValue(t, r, "narwhal_spilled_prompts_total"); v != 1 {
		t.Fatalf("narwhal_spilled_prompts_total %v: expected 1", v)
	}
	r.stop()
	recs := r.jr.records()
	rows := checkJournal(t, recs)
	if o := outcomes(rows); o["finish/length"]+o["finish/stop"] != 3 {
		t.Fatalf("outcomes %v: expected 3 finishes", o)
	}
	var spilled []event.Row
	for _, row := range rows {
		if row.Spilled {
			spilled = append(spilled, row)
		}
	}
	if len(spilled) != 1 || spilled[0].Req != 2 {
		t.Fatalf("spilled rows %+v: expected request 2 alone", spilled)
	}
	s := spilled[0]
	if s.PrefillInst != 1 || s.DecodeInst != 1 || s.Crossed || s.OutputTokens != 8 {
		t.Fatalf("spilled request: prefill on %d, decode on %d, crossed %v, %d tokens: expected both on the decode engine 1, 8 tokens", s.PrefillInst, s.DecodeInst, s.Crossed, s.OutputTokens)
	}
	for _, rec := range recs {
		if rec.Req == s.Req && rec.Kind == event.KindKVStart {
			t.Fatalf("spilled request moved KV (%+v): expected none", rec)
		}
	}
	for _, row := range rows {
		if row.Req != s.Req && row.PrefillInst != 0 {
			t.Fatalf("request %d prefilled on %d: expected the prefill engine 0", row.Req, row.PrefillInst)
		}
	}
}
