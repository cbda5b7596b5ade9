package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

func TestPromptText(t *testing.T) {
	for _, n := range []int{1, 7, 300, 9000, 300000} {
		a, b := PromptText(1, 5, n), PromptText(1, 5, n)
		if a != b || len(a) != 4*n {
			t.Fatalf("%d tokens: %d bytes (want %d), deterministic %v", n, len(a), 4*n, a == b)
		}
	}
	if PromptText(1, 5, 50) == PromptText(1, 6, 50) || PromptText(1, 5, 50) == PromptText(2, 5, 50) {
		t.Fatal("prompts do not depend on seed and index")
	}
	// Each rate's run salts its prompts: the same length, another text,
	// the same again for the same salt.
	a, b := SaltedPromptText(1, 7, 5, 50), SaltedPromptText(1, 8, 5, 50)
	if a == b || len(a) != len(b) || a != SaltedPromptText(1, 7, 5, 50) || SaltedPromptText(1, 0, 5, 50) != PromptText(1, 5, 50) {
		t.Fatal("salted prompts are not distinct per salt and deterministic")
	}
}

func TestQuantiles(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i)
	}
	q := quantiles(xs)
	if q.N != 100 || q.P50 != 50 || q.P99 != 99 || q.P90 != 90 || math.Abs(q.Mean-50.5) > 1e-9 {
		t.Fatalf("%+v", q)
	}
}

// rig is a zero-cost stub fleet behind the live router on loopback.
func rig(t testing.TB, arm string) (string, time.Time, func()) {
	t.Helper()
	return rigScaled(t, arm, 0)
}

// rigScaled is rig with the stubs' durations multiplied by scale (0:
// zero cost).
func rigScaled(t testing.TB, arm string, scale float64) (string, time.Time, func()) {
	t.Helper()
	spec, err := fleet.Parse([]byte(`name: lg
instances:
  count: 2
  profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}
slo: {ttft: 2s, tpot: 100ms}
`), "lg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := stub.StartLoopback(spec, stub.Options{TimeScale: &scale})
	if err != nil {
		t.Fatal(err)
	}
	urls := []string{sf.Servers()[0].URL(), sf.Servers()[1].URL()}
	ctrl, err := core.NewController(arm, 2)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := live.New(live.Config{Fleet: spec, URLs: urls, Controller: ctrl})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = rt.Run(ctx); close(done) }()
	srv := &http.Server{Handler: rt.Handler()}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), rt.Start(), func() {
		_ = srv.Close()
		cancel()
		<-done
		sf.Close()
	}
}

// evenPlan is n requests at rate req/s, evenly spaced.
func evenPlan(n int, rate float64, input, output int) []Item {
	plan := make([]Item, n)
	for i := range plan {
		plan[i] = Item{At: time.Duration(float64(i) / rate * 1e9), Class: "c", Input: input, Output: output, MinTokens: output}
	}
	return plan
}

// TestRunThroughRouter sends a few requests through the router and checks
// every outcome, the records and the summary.
func TestRunThroughRouter(t *testing.T) {
	url, start, stop := rig(t, "static:1P1D")
	defer stop()
	plan := evenPlan(20, 200, 50, 5)
	res, err := Run(context.Background(), Config{URL: url, RouterStart: start, KeepTokenTimes: true}, plan)
	if err != nil {
		t.Fatal(err)
	}
	if res.Partial || len(res.Outcomes) != 20 {
		t.Fatalf("partial %v, %d outcomes", res.Partial, len(res.Outcomes))
	}
	for _, o := range res.Outcomes {
		if !o.OK() || o.Tokens != 5 || o.Chunks != 5 || len(o.TokenAt) != 5 || o.FirstToken < o.Sent || o.End < o.FirstToken {
			t.Fatalf("outcome %+v", o)
		}
	}
	s := Summarize(res, 2*time.Second, 100*time.Millisecond)
	if s.OK != 20 || s.Good != 20 || s.TPOT.N != 20 || s.ITL.N != 80 || s.Degraded {
		t.Fatalf("summary %+v", s)
	}
	// The prompts as the engine counted them (its usage), not as planned;
	// total tokens per second count them with the output.
	server := 0
	for _, o := range res.Outcomes {
		if o.PromptTokens < 1 {
			t.Fatalf("outcome %+v: no prompt count from the server's usage", o)
		}
		server += o.PromptTokens
	}
	if s.InputFromServer != 20 || s.TotalInputTokens != server || s.TotalTokensRPS <= s.OutputTokensRPS {
		t.Fatalf("input tokens: %d from the server, total %d (server's %d), %.1f tok/s in all: expected the server's counts", s.InputFromServer, s.TotalInputTokens, server, s.TotalTokensRPS)
	}
	var f event.Fold
	for _, r := range Records(res) {
		f.Record(&r)
	}
	if err := f.Err(); err != nil || f.Len() != 20 {
		t.Fatalf("records fold: %v, %d rows", err, f.Len())
	}
}

// TestStopDrains cancels a run: sending stops, the result is partial.
func TestStopDrains(t *testing.T) {
	url, start, stop := rig(t, "aggregated")
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err := Run(ctx, Config{URL: url, RouterStart: start, Drain: 100 * time.Millisecond}, evenPlan(1000, 100, 10, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Partial || len(res.Outcomes) == 0 || len(res.Outcomes) >= 1000 {
		t.Fatalf("partial %v, %d sent", res.Partial, len(res.Outcomes))
	}
}

// TestStopAfterLastSend stops a run whose every request is sent but still
// decoding: they get the drain, then are cancelled, and the run is
// partial (it does not wait for answers that would take seconds).
func TestStopAfterLastSend(t *testing.T) {
	url, start, stop := rigScaled(t, "aggregated", 1)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	plan := evenPlan(2, 100, 10, 4000) // sent by 10 ms; 4,000 tokens at 2 ms or more each
	res, err := Run(ctx, Config{URL: url, RouterStart: start, Drain: 100 * time.Millisecond}, plan)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Partial || len(res.Outcomes) != 2 {
		t.Fatalf("partial %v, %d sent: expected a partial run of 2", res.Partial, len(res.Outcomes))
	}
	for _, o := range res.Outcomes {
		if o.OK() || o.Tokens >= 4000 {
			t.Fatalf("outcome %+v: expected a request cancelled by the drain", o)
		}
	}
}

// BenchmarkScheduleLag offers NWB_LAG_RATE (default 2,000) requests/s for
// NWB_LAG_SECONDS (default 2) to a zero-cost stub fleet through the router
// (aggregated: one leg per request; 64-token prompts, 2-token answers) and
// reports the schedule lag's percentiles. The target is p99 <= 5 ms.
//
//	go test ./live/loadgen -run '^$' -bench ScheduleLag -benchtime 1x
func BenchmarkScheduleLag(b *testing.B) {
	rate, secs := 2000.0, 2.0
	if v, err := strconv.ParseFloat(os.Getenv("NWB_LAG_RATE"), 64); err == nil && v > 0 {
		rate = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("NWB_LAG_SECONDS"), 64); err == nil && v > 0 {
		secs = v
	}
	url, start, stop := rig(b, "aggregated")
	defer stop()
	for b.Loop() {
		res, err := Run(context.Background(), Config{URL: url, RouterStart: start}, evenPlan(int(rate*secs), rate, 64, 2))
		if err != nil {
			b.Fatal(err)
		}
		s := Summarize(res, 0, 0)
		b.ReportMetric(s.Lag.P50*1e3, "lag-p50-ms")
		b.ReportMetric(s.Lag.P90*1e3, "lag-p90-ms")
		b.ReportMetric(s.Lag.P99*1e3, "lag-p99-ms")
		b.ReportMetric(float64(s.Errors), "errors")
		b.ReportMetric(float64(s.Sent)/secs, "offered-rps")
	}
}

// Summarize counts as good only answers that ended naturally: one cut at
// its output cap (min_tokens under max_tokens, finish length) is not, as
// the journal's rule says (its records carry cause length). Goodput's
// span starts at the first scheduled send, as the report's does.
func TestSummarizeGoodAndSpan(t *testing.T) {
	ok := func(at, end time.Duration, cut bool) Outcome {
		return Outcome{Scheduled: at, Sent: at, FirstToken: at + 10*time.Millisecond, End: end, Tokens: 10, Chunks: 10,
			Status: 200, Finish: "length", Cut: cut}
	}
	res := &Result{Planned: 2, Outcomes: []Outcome{ok(time.Second, 2*time.Second, false), ok(1500*time.Millisecond, 3*time.Second, true)},
		Elapsed: 3 * time.Second}
	s := Summarize(res, time.Second, time.Second)
	if s.OK != 2 || s.Good != 1 || s.DurationS != 2 || s.GoodputRPS != 0.5 {
		t.Fatalf("ok %d, good %d, duration %v s, goodput %v: expected 2, 1 (the cut answer is not good), 2 s from the first scheduled send, 0.5/s",
			s.OK, s.Good, s.DurationS, s.GoodputRPS)
	}
	var causes []event.Cause
	for _, r := range Records(res) {
		if r.Kind == event.KindFinish {
			causes = append(causes, r.Cause)
		}
	}
	if len(causes) != 2 || causes[0] != event.CauseStop || causes[1] != event.CauseLength {
		t.Fatalf("finish causes %v: expected stop, then length for the cut answer", causes)
	}
}

// An empty sample's percentiles are null in JSON, never a zero latency.
func TestQuantilesJSONEmpty(t *testing.T) {
	b, err := json.Marshal(quantiles(nil))
	if err != nil || string(b) != `{"n":0,"mean":null,"p50":null,"p90":null,"p95":null,"p99":null}` {
		t.Fatalf("%s, %v", b, err)
	}
	b, _ = json.Marshal(quantiles([]float64{0.5}))
	if string(b) != `{"n":1,"mean":0.5,"p50":0.5,"p90":0.5,"p95":0.5,"p99":0.5}` {
		t.Fatalf("%s", b)
	}
}

// A stream that ends cleanly after its finish reason but without
// data: [DONE] is a whole answer (as vllm bench serve reads it); one that
// ends before any finish reason is an error.
// Prompts of one prefix group begin with the same text, as long as the
// trace's shared prefix, so a target's prefix cache sees the trace's
// sharing; the rest is the request's own, and the length stays exact.
func TestSharedPromptText(t *testing.T) {
	const seed, salt = 3, 9
	a, b := SharedPromptText(seed, salt, 1, 300, 7, 200), SharedPromptText(seed, salt, 2, 300, 7, 200)
	if len(a) != 1200 || len(b) != 1200 || a[:800] != b[:800] || a[800:] == b[800:] {
		t.Fatalf("one group: lengths %d, %d (want 1200), shared head %v, own tails %v", len(a), len(b), a[:800] == b[:800], a[800:] != b[800:])
	}
	if c := SharedPromptText(seed, salt, 1, 300, 8, 200); c[:800] == a[:800] {
		t.Fatal("two groups share a prefix")
	}
	if c := SharedPromptText(seed, salt+1, 1, 300, 7, 200); c[:800] == a[:800] {
		t.Fatal("another salt (another rate's run) shares the group's prefix")
	}
	if SharedPromptText(seed, salt, 1, 300, 0, 200) != SaltedPromptText(seed, salt, 1, 300) ||
		SharedPromptText(seed, salt, 1, 300, 7, 0) != SaltedPromptText(seed, salt, 1, 300) {
		t.Fatal("no group or no prefix is not the request's own prompt")
	}
	// A prefix as long as the prompt (or longer, clipped) is the whole
	// prompt, the same for every request of the group; one past the end of
	// the base text wraps and keeps the length.
	if w := SharedPromptText(seed, salt, 1, 50, 7, 80); w != SharedPromptText(seed, salt, 2, 50, 7, 50) || len(w) != 200 {
		t.Fatal("a whole-prompt prefix differs between requests of its group")
	}
	if long := SharedPromptText(seed, salt, 1, 300_000, 7, 290_000); len(long) != 1_200_000 {
		t.Fatalf("a prompt longer than the base text: %d bytes", len(long))
	}
}

// A conversation's turns (imported Mooncake: each turn's prefix group is
// the group the turn before left cached) begin with the text of the turn
// before, for the prefix's length, down the conversation; a first turn
// shares only its group's text; plans without cached groups get
// SharedPromptText's prompts, unchanged.
func TestTurnTexts(t *testing.T) {
	const seed, salt = 3, 9
	plan := []Item{
		{Input: 1300, PrefixGroup: 5, PrefixTokens: 512, CacheGroup: 11, CacheTokens: 1024}, // turn 1: shares block 0 with others
		{Input: 900},
		{Input: 2100, PrefixGroup: 11, PrefixTokens: 1024, CacheGroup: 12, CacheTokens: 2048}, // turn 2
		{Input: 2600, PrefixGroup: 12, PrefixTokens: 2048, CacheGroup: 13, CacheTokens: 2560}, // turn 3
		{Input: 700, PrefixGroup: 5, PrefixTokens: 512},                                       // another conversation's first turn
		{Input: 3000, PrefixGroup: 99, PrefixTokens: 1000},                                    // a group no item left
	}
	x := turnTexts{seed: seed, salt: salt, plan: plan}
	var p []string
	for i := range plan {
		p = append(p, x.prompt(i))
		if len(p[i]) != plan[i].Input*4 {
			t.Fatalf("prompt %d: %d bytes, want %d", i, len(p[i]), plan[i].Input*4)
		}
	}
	switch {
	case p[2][:1024*4] != p[0][:1024*4] || p[2][1024*4:1025*4] == p[0][1024*4:1025*4]:
		t.Error("turn 2 does not begin with turn 1's 1024 tokens, then its own")
	case p[3][:2048*4] != p[2][:2048*4]:
		t.Error("turn 3 does not begin with turn 2's 2048 tokens")
	case p[3][:512*4] != p[4][:512*4] || p[0][:512*4] != groupHead(seed, salt, 5, 512):
		t.Error("the shared first block is not group 5's text in every prompt")
	case p[5] != SharedPromptText(seed, salt, 5, 3000, 99, 1000) || p[1] != SharedPromptText(seed, salt, 1, 900, 0, 0):
		t.Error("a prompt whose group no earlier item left is not SharedPromptText's")
	}
	// Without cached groups (synthetic traces) every prompt is
	// SharedPromptText's, as before.
	y := turnTexts{seed: seed, salt: salt, plan: []Item{{Input: 300, PrefixGroup: 7, PrefixTokens: 200}, {Input: 300, PrefixGroup: 7, PrefixTokens: 200}}}
	for i := 0; i < 2; i++ {
		if y.prompt(i) != SharedPromptText(seed, salt, i, 300, 7, 200) {
			t.Fatalf("synthetic prompt %d changed", i)
		}
	}
}

// The prompts sent carry the plan's shared prefixes.
func TestRunSendsSharedPrefixes(t *testing.T) {
	var mu sync.Mutex
	var prompts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		var body struct{ Prompt string }
		if err := json.NewDecoder(q.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		mu.Lock()
		prompts = append(prompts, body.Prompt)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	plan := evenPlan(3, 100, 64, 1)
	for i := range plan {
		plan[i].PrefixGroup, plan[i].PrefixTokens = 5, 48
	}
	plan[2].PrefixGroup = 0
	if _, err := Run(context.Background(), Config{URL: srv.URL, Seed: 4, Salt: 2}, plan); err != nil {
		t.Fatal(err)
	}
	sort.Strings(prompts)
	shared := 0
	for i := range prompts {
		for j := i + 1; j < len(prompts); j++ {
			if prompts[i][:192] == prompts[j][:192] {
				shared++
			}
		}
	}
	if len(prompts) != 3 || shared != 1 {
		t.Fatalf("%d prompts, %d pairs sharing 192 bytes: expected 3 prompts and the one pair of group 5", len(prompts), shared)
	}
}

func TestStreamWithoutDone(t *testing.T) {
	for _, tc := range []struct {
		finish string
		ok     bool
	}{{`"stop"`, true}, {`null`, false}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":"+tc.finish+"}]}\n\n")
		}))
		res, err := Run(context.Background(), Config{URL: srv.URL}, evenPlan(1, 1, 10, 2))
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if o := res.Outcomes[0]; o.OK() != tc.ok || (tc.ok && o.Tokens != 2) {
			t.Fatalf("finish %s: outcome %+v, expected ok %v", tc.finish, o, tc.ok)
		}
	}
}

// Errors say what went wrong: a whole JSON answer to stream: true is
// not a stream, a stream cut mid-answer ended early, and a request that
// outlives the request timeout (the first-token bound left at its
// default, the same) is a request timeout, never a first-token one.
func TestStreamErrorsNamed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter)
		cfg   Config
		want  string
	}{
		{"json", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"index":0,"text":" a b","finish_reason":"length"}]}`)
		}, Config{}, `the answer was not a stream (Content-Type "application/json"`},
		{"cut", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n")
		}, Config{}, "the stream ended before its finish reason"},
		{"slow", func(w http.ResponseWriter) { time.Sleep(300 * time.Millisecond) }, Config{RequestTimeout: 50 * time.Millisecond}, "request timeout"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) { tc.serve(w) }))
		cfg := tc.cfg
		cfg.URL = srv.URL
		res, err := Run(context.Background(), cfg, evenPlan(2, 100, 10, 2))
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Outcomes {
			if o.OK() || !strings.HasPrefix(o.Err, tc.want) {
				t.Errorf("%s: outcome error %q, expected %q", tc.name, o.Err, tc.want)
			}
		}
	}
}

// A stream whose last line, data: [DONE], lacks its newline ended after
// its finish reason: a whole answer, as vllm bench serve takes it.
func TestStreamDoneUnterminated(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]")
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL}, evenPlan(1, 1, 10, 2))
	if err != nil {
		t.Fatal(err)
	}
	if o := res.Outcomes[0]; !o.OK() || o.Tokens != 2 {
		t.Fatalf("outcome %+v: expected a whole answer of 2 tokens", o)
	}
}

// A 200 stream with no output chunk is an error, not an answer (vllm
// bench serve fails it too): it cannot raise the throughput.
func TestStreamWithoutOutput(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}],\"usage\":{\"completion_tokens\":0}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL}, evenPlan(3, 100, 10, 2))
	if err != nil {
		t.Fatal(err)
	}
	if s := Summarize(res, 0, 0); s.OK != 0 || s.Errors != 3 || s.RequestRPS != 0 || s.E2E.N != 0 {
		t.Fatalf("summary %+v: expected 3 errors and nothing counted as served", s)
	}
}

// With MaxConcurrency, the wait for a slot is the client's own queue
// (client_queue_s): not schedule lag (so not DEGRADED), and the goodput's
// TTFT counts from when the slot was free, as vllm bench serve counts it.
func TestMaxConcurrencyQueue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		for k := range 2 {
			time.Sleep(60 * time.Millisecond)
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" t%d\",\"finish_reason\":null}]}\n\n", k)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	// 10 requests at 100 req/s through one slot, each about 120 ms: each
	// waits for the one before it.
	res, err := Run(context.Background(), Config{URL: srv.URL, MaxConcurrency: 1}, evenPlan(10, 100, 10, 2))
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(res, 5*time.Second, 5*time.Second)
	if s.OK != 10 || s.Degraded || s.ClientQueue.P99 < 0.5 || s.Lag.P99 > DegradedLag.Seconds() || s.Good != 10 {
		t.Fatalf("summary %+v: expected 10 good answers, a client queue of over 0.5 s at p99, no lag, not degraded", s)
	}
	for _, o := range res.Outcomes {
		if o.Sent < o.Ready() {
			t.Fatalf("outcome %+v sent before it was ready", o)
		}
	}
}
