package live

import (
	"io"
	"strings"
	"sync"
	"testing"

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
	// The stubs take the profile's time: the first prompt's 0.6 s prefill
	// is still running when the next two arrive, whatever the machine's
	// load.
	scale := 1.0
	ctrl := &core.Scheduled{Arm: "spill-test", Steps: []core.ScheduleStep{{At: 0, Prefill: 1}}}
	r := startRigSpec(t, spec, rigOpts{ctrl: ctrl, stub: stub.Options{TimeScale: &scale}})
	prompt := strings.TrimSpace(strings.Repeat("word ", 600))
	admitted := func() int {
		n := 0
		for _, rec := range r.jr.records() {
			if rec.Kind == event.KindAdmit {
				n++
			}
		}
		return n
	}
	var wg sync.WaitGroup
	for k := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"`+prompt+`","max_tokens":8,"min_tokens":8,"stream":true}`, nil)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
		// Arrival order 1, 2, 3: each admitted before the next is sent.
		waitFor(t, "the prompt admitted", func() bool { return admitted() > k })
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
