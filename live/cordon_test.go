package live

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// cordon POSTs /engines/NAME/cordon or /uncordon and returns the status
// and the engine's state (or the error's code).
func cordon(t *testing.T, r *rig, name, verb string) (int, EngineState, string) {
	t.Helper()
	resp, err := http.Post(r.url+"/engines/"+name+"/"+verb, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var es EngineState
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &es); err != nil {
			t.Fatalf("%s %s: %s: %v", verb, name, b, err)
		}
		return resp.StatusCode, es, ""
	}
	e := api.ParseError(resp.StatusCode, b)
	if e == nil {
		t.Fatalf("%s %s: %d without an error body: %s", verb, name, resp.StatusCode, b)
	}
	return resp.StatusCode, es, e.Code
}

// streamAll sends n streamed requests of want tokens at once and returns
// each one's streamed token count and error (nil when it ended with
// [DONE] and no error event).
func streamAll(t *testing.T, r *rig, n, want int, tag string) ([]int, []error) {
	t.Helper()
	counts, errs := make([]int, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"stub","prompt":"%s %d","max_tokens":%d,"min_tokens":%d,"stream":true}`, tag, i, want, want)
			resp, err := http.Post(r.url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				errs[i] = fmt.Errorf("status %d: %s", resp.StatusCode, b)
				return
			}
			sr := api.NewSSEReader(resp.Body)
			for {
				p, done, err := sr.ReadEvent()
				if done {
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
				if strings.Contains(string(p), `"error"`) {
					errs[i] = fmt.Errorf("error event: %s", p)
					return
				}
				if strings.Contains(string(p), `"choices":[{`) {
					counts[i]++
				}
			}
		}()
	}
	wg.Wait()
	return counts, errs
}

// resumed starts a router of r's fleet under arm from rs, as a router
// taking over under --ha would (its journal in memory; logf, when set, its
// log), and returns it with its stop.
func resumed(t *testing.T, r *rig, arm string, rs *Resume, logf func(string, ...any)) (*Router, func()) {
	t.Helper()
	ctrl, err := core.NewController(arm, len(r.router.cfg.URLs))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Fleet: r.router.cfg.Fleet, URLs: r.router.cfg.URLs, Controller: ctrl, Model: "stub", Recorder: &memJournal{}, Resume: rs, Logf: logf})
	if err != nil {
		t.Fatalf("a takeover: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	return b, func() { cancel(); <-ran }
}

// An operator cordons a decode engine that holds streams: they run to
// their end, new legs go elsewhere, /state, /ready and the metrics say
// so, and uncordoning returns it to service. The last engine taking
// placements cannot be cordoned; unknown engines are a 404. Every request
// ends exactly once and none is placed on the engine while it is
// cordoned (the journal's invariants: a cordon is a health record, cause
// operator).
func TestCordonDrainsAndReturns(t *testing.T) {
	spec := testFleetWith(t, 3, "{a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.01}", "{ttft: 2s, tpot: 100ms}")
	r := startRigSpec(t, spec, rigOpts{arm: "static:1P2D"})
	const want = 40

	// Streams on both decode engines; cordon e1 while they run.
	var first [2][]int
	var firstErr [2][]error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first[0], firstErr[0] = streamAll(t, r, 6, want, "before")
	}()
	waitFor(t, "decode legs on e1", func() bool { st, _ := r.router.State(); return st.Engines[1].DecodeLegs > 0 })
	code, es, _ := cordon(t, r, "e1", "cordon")
	if code != 200 || !es.Cordoned || es.Down || es.DecodeLegs == 0 {
		t.Fatalf("cordon e1: %d %+v, expected cordoned, not down, its streams still there", code, es)
	}
	cordonedAt := len(r.jr.records())
	if code, es, _ := cordon(t, r, "e1", "cordon"); code != 200 || !es.Cordoned {
		t.Errorf("cordon again: %d %+v, expected the same answer", code, es)
	}
	first[1], firstErr[1] = streamAll(t, r, 6, want, "during")
	<-done
	for k := range first {
		for i, n := range first[k] {
			if firstErr[k][i] != nil || n != want {
				t.Errorf("stream %d/%d: %d tokens, %v: expected %d and no error", k, i, n, firstErr[k][i], want)
			}
		}
	}
	for _, rec := range r.jr.records()[cordonedAt:] {
		if rec.Kind == event.KindDecodeStart && rec.Inst == 1 {
			t.Fatalf("a decode placed on cordoned e1: %+v", rec)
		}
	}
	st, _ := r.router.State()
	if !st.Engines[1].Cordoned || st.Engines[1].DecodeLegs != 0 {
		t.Errorf("e1 after its streams: %+v, expected cordoned and drained", st.Engines[1])
	}
	resp, err := http.Get(r.url + "/ready")
	if code, _ := statusJSON(t, resp, err); code != 200 {
		t.Errorf("/ready with e1 cordoned: %d", code)
	}
	metrics := func() string {
		resp, err := http.Get(r.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	m := metrics()
	for _, line := range []string{`narwhal_engine_cordoned{engine="e1"} 1`, `narwhal_engine_up{engine="e1"} 1`, `narwhal_engine_cordoned{engine="e2"} 0`} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}

	// e2 is now the last decode engine, and the one prefill engine cannot
	// give up its role: refused, and so is e0 (the last prefill engine,
	// with one decode engine online).
	for _, name := range []string{"e2", "e0"} {
		if code, _, c := cordon(t, r, name, "cordon"); code != 409 || c != "last_in_role" {
			t.Errorf("cordon %s: %d %q, expected 409 last_in_role", name, code, c)
		}
	}
	if code, _, c := cordon(t, r, "e9", "cordon"); code != 404 || c != "no_engine" {
		t.Errorf("unknown engine: %d %q", code, c)
	}
	if resp, err := http.Get(r.url + "/engines/e1/cordon"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET cordon: %v %v", resp.StatusCode, err)
	}

	// Uncordoned, e1 takes decode legs again.
	uncordonAt := len(r.jr.records())
	if code, es, _ := cordon(t, r, "e1", "uncordon"); code != 200 || es.Cordoned || es.Down {
		t.Fatalf("uncordon e1: %d %+v", code, es)
	}
	if _, errs := streamAll(t, r, 8, 4, "after"); errs[0] != nil {
		t.Fatal(errs[0])
	}
	back := false
	for _, rec := range r.jr.records()[uncordonAt:] {
		back = back || rec.Kind == event.KindDecodeStart && rec.Inst == 1
	}
	if !back {
		t.Errorf("no decode on e1 after it was uncordoned")
	}
	r.stop()
	recs := r.jr.records()
	var health []string
	for _, rec := range recs {
		if rec.Kind == event.KindHealth {
			health = append(health, fmt.Sprintf("e%d %s %s", rec.Inst, rec.Text, rec.Cause))
		}
	}
	if got := strings.Join(health, ", "); got != "e1 down operator, e1 up operator" {
		t.Errorf("health records: %s", got)
	}
	// The two refusals are journaled as decisions, as the simulator's.
	refusals := 0
	for _, rec := range recs {
		if rec.Kind == event.KindDecision && strings.Contains(rec.Text, `"refused":"last_in_role"`) {
			refusals++
		}
	}
	if refusals != 2 {
		t.Errorf("%d refusals journaled, expected 2", refusals)
	}
	checkJournal(t, recs)
}

// Cordoning a static split's one prefill engine moves a decode engine
// into prefill while it is out (cause engine_down), requests are served
// meanwhile, and uncordoning sends that engine back (cause engine_up):
// the split is 1P2D again, in /state and in the journal.
func TestCordonCoverReturns(t *testing.T) {
	spec := testFleetWith(t, 3, "{a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.01}", "{ttft: 2s, tpot: 100ms}")
	r := startRigSpec(t, spec, rigOpts{arm: "static:1P2D"})
	roles := func() string {
		st, _ := r.router.State()
		var out []string
		for _, e := range st.Engines {
			out = append(out, e.Name+"="+e.Role)
		}
		return strings.Join(out, " ")
	}
	if got := roles(); got != "e0=prefill e1=decode e2=decode" {
		t.Fatalf("roles %s", got)
	}
	if code, _, c := cordon(t, r, "e0", "cordon"); code != 200 {
		t.Fatalf("cordon e0: %d %q", code, c)
	}
	during := roles()
	if strings.Count(during, "=prefill") != 2 {
		t.Fatalf("roles with e0 cordoned %s: expected a decode engine moved into prefill", during)
	}
	if _, errs := streamAll(t, r, 4, 8, "during"); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// /state names the pairing, and a router resuming this state (--ha)
	// undoes the cover when it uncordons e0.
	published, _ := r.router.State()
	donor := -1
	for i, e := range published.Engines {
		if e.Covers == "e0" {
			donor = i
		}
	}
	if donor < 1 {
		t.Fatalf("/state %+v: expected the moved engine to say it covers e0", published.Engines)
	}
	rs, err := ResumeFrom(published, r.router.cfg.Fleet.Names())
	if err != nil || rs.Covers[donor] != 0 {
		t.Fatalf("resume: %v %+v", err, rs)
	}
	b, stopB := resumed(t, r, "static:1P2D", rs, nil)
	if _, err := b.Cordon("e0", false); err != nil {
		t.Fatalf("the resumed router's uncordon: %v", err)
	}
	if st, _ := b.State(); st.Engines[0].Role != "prefill" || st.Engines[donor].Role != "decode" || st.Engines[donor].Covers != "" {
		t.Errorf("the resumed router after the uncordon: %+v, expected 1P2D", st.Engines)
	}
	stopB()
	// A published pairing the roles no longer bear out (e0 moved to
	// decode while cordoned) does not stop a takeover: it is dropped.
	stale := published
	stale.Engines = slices.Clone(published.Engines)
	stale.Engines[0].Role = "decode"
	rs, err = ResumeFrom(stale, r.router.cfg.Fleet.Names())
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var logMu sync.Mutex
	c2, stopC2 := resumed(t, r, "static:1P2D", rs, func(format string, args ...any) {
		logMu.Lock()
		fmt.Fprintf(&logs, format+"\n", args...)
		logMu.Unlock()
	})
	logMu.Lock()
	logged := logs.String()
	logMu.Unlock()
	if st, _ := c2.State(); st.Engines[donor].Covers != "" || !strings.Contains(logged, "the cover is not kept") {
		t.Errorf("stale cover: %+v, log %q: expected it dropped and said", st.Engines, logged)
	}
	stopC2()
	if _, err := ResumeFrom(State{Engines: []EngineState{{Name: "e0", Role: "prefill"}, {Name: "e1", Role: "prefill", Covers: "e7"}, {Name: "e2", Role: "decode"}}},
		r.router.cfg.Fleet.Names()); err == nil || !strings.Contains(err.Error(), `covers "e7"`) {
		t.Errorf("resume covering an unknown engine: %v", err)
	}

	if code, _, c := cordon(t, r, "e0", "uncordon"); code != 200 {
		t.Fatalf("uncordon e0: %d %q", code, c)
	}
	if got := roles(); got != "e0=prefill e1=decode e2=decode" {
		t.Errorf("roles after the uncordon %s: expected the split back to 1P2D", got)
	}
	if _, errs := streamAll(t, r, 4, 8, "after"); errs[0] != nil {
		t.Fatal(errs[0])
	}
	r.stop()
	var moves []string
	for _, rec := range r.jr.records() {
		if rec.Kind == event.KindRoleMove && !rec.Opening() {
			moves = append(moves, fmt.Sprintf("e%d %s->%s %s", rec.Inst, rec.From, rec.To, rec.Cause))
		}
	}
	if len(moves) != 2 || !strings.HasSuffix(moves[0], "decode->prefill engine_down") || !strings.HasSuffix(moves[1], "prefill->decode engine_up") ||
		strings.Fields(moves[0])[0] != strings.Fields(moves[1])[0] {
		t.Errorf("role moves %v: expected one engine into prefill and back", moves)
	}
	checkJournal(t, r.jr.records())
}

// A cordoned engine that restarts (a new process, as an upgrade during
// maintenance would) stays out of service until uncordoned, and then
// rejoins at its new generation; a router resuming another's state keeps
// the cordon.
func TestCordonHoldsAcrossRestartAndResume(t *testing.T) {
	r := startRig(t, rigOpts{n: 3, arm: "static:1P2D", configure: func(c *Config) { c.SweepInterval = 20 * time.Millisecond }})
	waitFor(t, "e1's start time read", func() bool { st, _ := r.router.State(); return st.Engines[1].ProcessStart != 0 })
	if code, _, _ := cordon(t, r, "e1", "cordon"); code != 200 {
		t.Fatal(code)
	}
	st, _ := r.router.State()
	started := st.Engines[1].ProcessStart
	victim := r.stubs.Servers()[1]
	victim.Kill()
	time.Sleep(50 * time.Millisecond)
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new process seen, answering", func() bool {
		st, _ := r.router.State()
		return st.Engines[1].ProcessStart != started && !st.Engines[1].Down
	})
	// Seen at generation 1, published so (a new leader rejoins it there),
	// but not online.
	if st, _ := r.router.State(); !st.Engines[1].Cordoned || st.Engines[1].Generation != 1 || st.Engines[1].Online {
		t.Fatalf("e1 while cordoned after its restart: %+v, expected cordoned at generation 1, offline", st.Engines[1])
	}

	// A router resuming this state keeps e1 cordoned.
	published, _ := r.router.State()
	rs, err := ResumeFrom(published, r.router.cfg.Fleet.Names())
	if err != nil || !rs.Cordoned[1] {
		t.Fatalf("resume: %v %+v", err, rs)
	}
	b, stopB := resumed(t, r, "static:1P2D", rs, nil)
	if st, _ := b.State(); !st.Engines[1].Cordoned || st.Engines[1].Down || st.Engines[1].Generation != 1 {
		t.Errorf("the resumed router's e1: %+v, expected cordoned at generation 1", st.Engines[1])
	}
	stopB()

	if code, es, _ := cordon(t, r, "e1", "uncordon"); code != 200 || es.Cordoned || es.Generation != 1 {
		t.Fatalf("uncordon: %d %+v, expected back at generation 1", code, es)
	}
	r.stop()
	var last event.Record
	for _, rec := range r.jr.records() {
		if rec.Kind == event.KindHealth && rec.Inst == 1 {
			last = rec
		}
	}
	if last.Text != "up" || last.Cause != event.CauseOperator || last.Tokens != 1 {
		t.Errorf("e1's last health record %+v: expected up by the operator at generation 1", last)
	}
	checkJournal(t, r.jr.records())
}

// Under aggregated serving each request runs whole on one engine: a
// cordon while prompts are being prefilled there lets them decode where
// they are (the core does not fail them for want of a decode engine).
// Two mixed engines need no role covered; the second cannot be cordoned
// while the first is.
func TestCordonAggregatedMidPrefill(t *testing.T) {
	spec := testFleetWith(t, 2, "{a: 0, b: 1.0e-5, c: 0.3, slope: 1.0e-7, intercept: 0.005}", "{ttft: 5s, tpot: 100ms}")
	r := startRigSpec(t, spec, rigOpts{arm: "aggregated"})
	var counts []int
	var errs []error
	done := make(chan struct{})
	go func() { defer close(done); counts, errs = streamAll(t, r, 4, 8, "mid-prefill") }()
	waitFor(t, "prefill legs on e0", func() bool { st, _ := r.router.State(); return st.Engines[0].PrefillLegs > 0 })
	if code, es, _ := cordon(t, r, "e0", "cordon"); code != 200 || es.PrefillLegs == 0 {
		t.Fatalf("cordon e0 mid-prefill: %d %+v", code, es)
	}
	if code, _, c := cordon(t, r, "e1", "cordon"); code != 409 || c != "last_engine" {
		t.Errorf("cordon the last engine: %d %q, expected 409 last_engine", code, c)
	}
	<-done
	for i := range counts {
		if errs[i] != nil || counts[i] != 8 {
			t.Errorf("stream %d: %d tokens, %v: expected 8 and no error", i, counts[i], errs[i])
		}
	}
	r.stop()
	for _, rec := range r.jr.records() {
		if rec.Kind == event.KindFail {
			t.Errorf("a request failed: %+v", rec)
		}
	}
	checkJournal(t, r.jr.records())
}

// An engine that stopped while cordoned is not returned to service: the
// uncordon probes it first (409 not_answering, still cordoned), since a
// cordoned engine takes no traffic for the breaker to notice. Once it
// answers as a new process it is uncordoned at its new generation.
func TestUncordonProbesFirst(t *testing.T) {
	r := startRig(t, rigOpts{n: 3, arm: "static:1P2D", configure: func(c *Config) { c.SweepInterval = time.Hour }})
	waitFor(t, "e1's start time read", func() bool { st, _ := r.router.State(); return st.Engines[1].ProcessStart != 0 })
	if code, _, _ := cordon(t, r, "e1", "cordon"); code != 200 {
		t.Fatal(code)
	}
	victim := r.stubs.Servers()[1]
	victim.Kill()
	if code, _, c := cordon(t, r, "e1", "uncordon"); code != 409 || c != "not_answering" {
		t.Fatalf("uncordon a dead engine: %d %q, expected 409 not_answering", code, c)
	}
	if st, _ := r.router.State(); !st.Engines[1].Cordoned {
		t.Fatalf("e1 after a refused uncordon: %+v", st.Engines[1])
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	if code, es, _ := cordon(t, r, "e1", "uncordon"); code != 200 || es.Cordoned || es.Generation != 1 {
		t.Fatalf("uncordon the restarted engine: %d %+v, expected back at generation 1", code, es)
	}
	r.stop()
	checkJournal(t, r.jr.records())
}

// Cordoning an engine the breaker has ejected takes nothing out of
// service, so no engine_down record says the operator acted: a decision
// does, and another when the cordon is lifted while the engine is still
// ejected (it then returns when its probes admit it).
func TestCordonEjectedJournaled(t *testing.T) {
	r := startRig(t, rigOpts{n: 3, arm: "static:1P2D", configure: func(c *Config) { c.SweepInterval = 20 * time.Millisecond }})
	victim := r.stubs.Servers()[2]
	victim.Kill()
	waitFor(t, "e2 ejected", func() bool { st, _ := r.router.State(); return st.Engines[2].Down })
	if code, es, _ := cordon(t, r, "e2", "cordon"); code != 200 || !es.Cordoned {
		t.Fatalf("cordon the ejected e2: %d %+v", code, es)
	}
	if code, es, _ := cordon(t, r, "e2", "uncordon"); code != 200 || es.Cordoned {
		t.Fatalf("uncordon the ejected e2: %d %+v", code, es)
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "e2 readmitted", func() bool { st, _ := r.router.State(); return st.Engines[2].Online })
	r.stop()
	var got []core.CordonDecision
	for _, rec := range r.jr.records() {
		var d core.CordonDecision
		if rec.Kind == event.KindDecision && strings.Contains(rec.Text, `"cordon"`) && json.Unmarshal([]byte(rec.Text), &d) == nil {
			got = append(got, d)
		}
	}
	if len(got) != 2 || got[0].Cordon != 2 || got[0].Uncordon || got[0].Refused != "" || !strings.Contains(got[0].Why, "down already") ||
		got[1].Cordon != 2 || !got[1].Uncordon || !strings.Contains(got[1].Why, "readmission") {
		t.Errorf("cordon decisions %+v: expected e2's cordon while down, then its uncordon while ejected", got)
	}
	checkJournal(t, r.jr.records())
}
