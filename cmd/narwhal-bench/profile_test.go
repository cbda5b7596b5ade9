package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// stubTruth is the profile the test stubs run on: a sweep of a few
// seconds at time scale 1, every prefill and decode iteration 20 ms or
// more, so the overheads of the stub and the client (a millisecond or
// two on each time; on a loaded machine with the race detector, up to
// about 7 ms) stay small beside them, and the quadratic and the context
// terms are large enough to be measured.
var stubTruth = timing.Profile{A: 4e-9, B: 2e-5, C: 0.04, Slope: 3e-6, Intercept: 0.02}

// fastSweep is a short sweep for stubTruth: about 4 s.
var fastSweep = []string{"--prefill-lens", "256,1024,2048,4096", "--prefill-repeats", "3",
	"--decode-concurrency", "1,4,16", "--decode-tokens", "24", "--decode-prompt", "512"}

// smallSweep is a sweep of about a second.
var smallSweep = []string{"--prefill-lens", "256,2048,4096", "--prefill-repeats", "1",
	"--decode-concurrency", "1,8", "--decode-tokens", "8", "--decode-prompt", "256"}

// tinySweep measures almost nothing (for tests of everything but the fit).
var tinySweep = []string{"--prefill-lens", "32,64,128", "--prefill-repeats", "1",
	"--decode-concurrency", "1,2", "--decode-tokens", "4", "--decode-prompt", "32"}

// startProfileStubs starts n stub engines on stubTruth, with prefix
// caches (as vLLM's default), at time scale 1.
func startProfileStubs(t *testing.T, n int) *stub.Fleet {
	t.Helper()
	var b strings.Builder
	b.WriteString("name: truth\ninstances:\n  list:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - {name: e%d, profile: %s}\n", i, profileYAML(stubTruth))
	}
	b.WriteString("slo: {ttft: 2s, tpot: 100ms}\n")
	spec, err := fleet.Parse([]byte(b.String()), "truth")
	if err != nil {
		t.Fatal(err)
	}
	pc := engine.DefaultPrefixCache
	sf, err := stub.StartLoopback(spec, stub.Options{PrefixCache: &pc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sf.Close)
	return sf
}

// writeProfileFleet writes a fleet file naming urls, every engine with
// the profile old, in block style with comments.
func writeProfileFleet(t *testing.T, urls []string, old timing.Profile) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# engines to measure\nname: measured\ninstances:\n  list:\n")
	for i, u := range urls {
		fmt.Fprintf(&b, "    - name: e%d   # engine %d\n      url: %q\n      profile:   # by hand\n", i, i, u)
		fmt.Fprintf(&b, "        a: %s\n        b: %s   # guessed\n        c: %s\n        slope: %s\n        intercept: %s\n",
			fmtCoef(old.A), fmtCoef(old.B), fmtCoef(old.C), fmtCoef(old.Slope), fmtCoef(old.Intercept))
	}
	b.WriteString("slo: {ttft: 2s, tpot: 100ms}   # objectives\n")
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// closedURL is the url of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// The whole command against a stub whose profile is known: the fitted
// curves meet the stub's at every swept point within a tolerance a loaded
// machine keeps (the stub and the client add about a millisecond to
// every time; a stall adds more), --json parses, and --write's copy loads
// with the fit for the measured engine, the old profile for the one
// --only left out (unreachable: never asked), and the file's comments.
func TestProfileFitsStub(t *testing.T) {
	sf := startProfileStubs(t, 1)
	old := timing.Reference
	path := writeProfileFleet(t, []string{sf.Servers()[0].URL(), closedURL(t)}, old)
	out := filepath.Join(t.TempDir(), "out.yaml")
	args := append([]string{"profile", "--fleet", path, "--only", "e0", "--write", out, "--json"}, fastSweep...)
	var (
		ep       engineProfile
		fit      timing.Profile
		problems []string
	)
	// A machine loaded enough to stall the stub or the client for tens
	// of milliseconds at a time, at two of three repeats of one length,
	// bends a fit past the tolerance below; a profiler that measures the
	// wrong thing misses it every time. So the sweep gets three tries.
	for try := 1; try <= 3; try++ {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		var res profileResult
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("--json: %v\n%s", err, stdout)
		}
		if len(res.Engines) != 1 || res.Engines[0].Name != "e0" || res.Engines[0].Fit == nil || res.Written != out {
			t.Fatalf("result: %s", stdout)
		}
		ep = res.Engines[0]
		fit = *ep.Fit
		t.Logf("try %d: fit %s (stub %s), prefill R² %s, decode R² %s, %d gaps", try, profileYAML(fit), profileYAML(stubTruth), fmtR2(ep.Prefill.R2), fmtR2(ep.Decode.R2), len(ep.Decode.Samples))
		if problems = fitProblems(t, ep); len(problems) == 0 {
			break
		}
		t.Logf("try %d: %s", try, strings.Join(problems, "; "))
	}
	for _, p := range problems {
		t.Error(p)
	}
	if ep.Tokens != "tokenize" || ep.Model != "stub" || ep.MaxModelLen != 32768 || ep.Current != old {
		t.Errorf("engine %+v", ep)
	}
	// --write: the copy loads, with the fit, the other engine's old
	// profile, and the comments.
	spec, err := fleet.Load(out)
	if err != nil {
		t.Fatalf("--write's copy does not load: %v", err)
	}
	if got := spec.Profiles(); got[0] != fit || got[1] != old {
		t.Errorf("--write's profiles %+v, expected the fit %+v and the old %+v", got, fit, old)
	}
	b, _ := os.ReadFile(out)
	for _, want := range []string{"# engines to measure", "name: e0   # engine 0", "profile:   # by hand", "# objectives", "b: 6e-05   # guessed"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("--write's copy lost %q:\n%s", want, b)
		}
	}
	if strings.Count(string(b), "# guessed") != 1 {
		t.Errorf("--write's copy: e0's profile block not replaced:\n%s", b)
	}
}

// fitProblems checks a fit of stubTruth at the sweep's points. Every
// measured time holds the stub's and the client's overheads, a
// millisecond or two a request or iteration, ten or more on a loaded
// machine with the race detector: they add to each curve's level (c,
// intercept), hardly to its shape. So each curve's lowest swept point is
// checked loosely (no less than the stub's, at most 20% and 10 ms more),
// and the other points' rise above it (a, b, slope) closely: within 15%
// and 3 ms of the stub's.
func fitProblems(t *testing.T, ep engineProfile) []string {
	fit := *ep.Fit
	var out []string
	checkCurve := func(name string, xs []float64, fit, truth func(float64) float64) {
		x0 := xs[0]
		for _, x := range xs {
			t.Logf("%s(%.0f): fit %.4g s, stub %.4g s (%+.1f%%)", name, x, fit(x), truth(x), 100*(fit(x)-truth(x))/truth(x))
		}
		if d := fit(x0) - truth(x0); d < -0.003 || d > 0.2*truth(x0)+0.010 {
			out = append(out, fmt.Sprintf("%s(%.0f): fit %.4g s, stub %.4g s: expected the stub's plus at most 20%% and 10 ms", name, x0, fit(x0), truth(x0)))
		}
		for _, x := range xs[1:] {
			got, want := fit(x)-fit(x0), truth(x)-truth(x0)
			if math.Abs(got-want) > 0.15*want+0.003 {
				out = append(out, fmt.Sprintf("%s(%.0f) - %s(%.0f): fit %.4g s, stub %.4g s: off by %.1f%%", name, x, name, x0, got, want, 100*(got-want)/want))
			}
		}
	}
	checkCurve("T", []float64{256, 1024, 2048, 4096},
		func(x float64) float64 { return fit.Prefill(int(x)) }, func(x float64) float64 { return stubTruth.Prefill(int(x)) })
	if len(ep.Decode.Points) != 3 {
		return append(out, fmt.Sprintf("decode points %+v, expected one per concurrency", ep.Decode.Points))
	}
	var ctxs []float64
	for _, p := range ep.Decode.Points {
		ctxs = append(ctxs, math.Round(p.X))
		// The contexts are the streams' prompts and answers.
		if lo, hi := float64(p.Sweep*512), float64(p.Sweep*(512+24+16)); p.X < lo || p.X > hi {
			out = append(out, fmt.Sprintf("%d streams: mean context %.0f tokens, expected %.0f to %.0f", p.Sweep, p.X, lo, hi))
		}
	}
	checkCurve("I", ctxs,
		func(x float64) float64 { return fit.Interval(int64(x)) }, func(x float64) float64 { return stubTruth.Interval(int64(x)) })
	return out
}

// The text output: the coefficients, the fit's quality, the table against
// the fleet file, the line to paste; and /tokenize missing (404): the
// prompts are sized by the estimate, and the output says so.
func TestProfileTextAndEstimate(t *testing.T) {
	sf := startProfileStubs(t, 1)
	h := sf.Servers()[0].Handler()
	noTokenize := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path == "/tokenize" {
			http.NotFound(w, q)
			return
		}
		h.ServeHTTP(w, q)
	}))
	defer noTokenize.Close()
	path := writeProfileFleet(t, []string{noTokenize.URL}, timing.Reference)
	code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path}, smallSweep...)...)
	// So short a sweep may fit coefficients the fleet file refuses on a
	// loaded machine (exit 1, said in a warning): the output is the same.
	if code != 0 && (code != 1 || !strings.Contains(stdout, "WARNING: the fleet file refuses this fit")) {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"engine e0  " + noTokenize.URL + "  model stub  context 32768", "tokens: ESTIMATED",
		"  fit      a ", "prefill  3 samples: R² ", "T(256)", "T(4096)", "I(", "(1 stream)", "(8 streams)", "fit vs file", "  profile: {a: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "profile e0: decode 8 streams x 8 tokens") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}
	t.Log("\n" + stdout)
}

// Bad flags and fleet files: exit 2, the message naming the flag, the
// value and what was expected, before any engine is asked.
func TestProfileBadInput(t *testing.T) {
	dir := t.TempDir()
	path := writeProfileFleet(t, []string{closedURL(t)}, timing.Reference)
	count := filepath.Join(dir, "count.yaml")
	os.WriteFile(count, []byte("name: c\ninstances: {count: 2, profile: {a: 0, b: 1.0e-5, c: 0.001, slope: 1.0e-7, intercept: 0.002}}\nslo: {ttft: 2s, tpot: 100ms}\n"), 0o644)
	nourl := filepath.Join(dir, "nourl.yaml")
	os.WriteFile(nourl, []byte("name: n\ninstances:\n  list:\n    - {name: x, profile: {a: 0, b: 1.0e-5, c: 0.001, slope: 1.0e-7, intercept: 0.002}}\nslo: {ttft: 2s, tpot: 100ms}\n"), 0o644)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--prefill-lens", "256,abc,1024"}, []string{"--prefill-lens", `"abc"`, "expected a comma-separated list of integers >= 1"}},
		{[]string{"--prefill-lens", "256,0,1024"}, []string{"--prefill-lens", `"0"`, ">= 1"}},
		{[]string{"--prefill-lens", "256,1024,256"}, []string{"--prefill-lens", `"256,1024,256"`, "2 distinct values: expected at least 3"}},
		{[]string{"--prefill-repeats", "0"}, []string{"--prefill-repeats 0", "expected at least 1"}},
		{[]string{"--decode-concurrency", "4"}, []string{"--decode-concurrency", `"4"`, "expected at least 2"}},
		{[]string{"--decode-concurrency", "1,-4"}, []string{"--decode-concurrency", `"-4"`, ">= 1"}},
		{[]string{"--decode-tokens", "1"}, []string{"--decode-tokens 1", "expected at least 2"}},
		{[]string{"--decode-prompt", "0"}, []string{"--decode-prompt 0", "expected at least 1"}},
		{[]string{"--request-timeout", "soon"}, []string{"--request-timeout", `"soon"`, "expected a positive duration"}},
		{[]string{"--request-timeout", "0s"}, []string{"--request-timeout", `"0s"`, "expected a positive duration"}},
		{[]string{"--only", "e9"}, []string{"--only", `"e9"`, "expected one of e0"}},
		{[]string{"--write", dir}, []string{"--write", dir, "a directory: expected a file path"}},
		{[]string{"--write", filepath.Join(dir, "no", "f.yaml")}, []string{"--write", "no directory", "expected a file path in an existing directory"}},
		{[]string{"--engine-cert", "c.pem"}, []string{"--engine-cert and --engine-key", "expected both or neither"}},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path}, c.args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, expected 2\n%s%s", c.args, code, stdout, stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: message lacks %q: %s", c.args, w, stderr)
			}
		}
	}
	for _, c := range []struct {
		fleet string
		want  []string
	}{
		{"demo", []string{"--fleet demo", "built-in fleet", "expected a fleet YAML file"}},
		{count, []string{"--fleet", "instances.count 2, no urls", "expected instances.list"}},
		{nourl, []string{"--fleet", "list[0].url (x): missing"}},
		{filepath.Join(dir, "none.yaml"), []string{"--fleet", "not a readable file"}},
	} {
		code, stdout, stderr := runCLI(t, "profile", "--fleet", c.fleet)
		if code != 2 {
			t.Errorf("--fleet %s: exit %d, expected 2\n%s%s", c.fleet, code, stdout, stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("--fleet %s: message lacks %q: %s", c.fleet, w, stderr)
			}
		}
	}
	if code, _, stderr := runCLI(t, "profile"); code != 2 || !strings.Contains(stderr, "fleet") {
		t.Errorf("no --fleet: exit %d: %s", code, stderr)
	}
	// Lengths beyond the engine's context are bad input too, found when
	// the engine says its context.
	sf := startProfileStubs(t, 1)
	path = writeProfileFleet(t, []string{sf.Servers()[0].URL()}, timing.Reference)
	code, stdout, stderr := runCLI(t, "profile", "--fleet", path, "--prefill-lens", "256,1024,40000")
	if code != 2 || !strings.Contains(stderr, "--prefill-lens: 40000 tokens: engine e0's context is 32768 tokens") || !strings.Contains(stderr, "expected lengths of at most 32767") {
		t.Errorf("a length past the context: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "profile", "--fleet", path, "--decode-prompt", "32760", "--decode-tokens", "64")
	if code != 2 || !strings.Contains(stderr, "--decode-prompt 32760 with --decode-tokens 64: 32824 tokens") {
		t.Errorf("a decode prompt past the context: exit %d\n%s%s", code, stdout, stderr)
	}
}

// An engine that cannot be reached, or whose /health is not 200, fails
// its check: exit 1, nothing measured (the others neither).
func TestProfileUnreachable(t *testing.T) {
	sf := startProfileStubs(t, 1)
	unhealthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unhealthy.Close()
	path := writeProfileFleet(t, []string{sf.Servers()[0].URL(), closedURL(t), unhealthy.URL}, timing.Reference)
	code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path}, tinySweep...)...)
	if code != 1 {
		t.Fatalf("exit %d, expected 1\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"profile e1: GET /health: unreachable", "profile e2: GET /health: answered 503", "2 of 3 engines failed their checks: nothing measured"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "prefill") {
		t.Errorf("measured although an engine failed its check:\n%s", stderr)
	}
}

// A hung engine (its completions never answer) fails when
// --request-timeout ends its request: exit 1, naming the flag.
func TestProfileHungEngine(t *testing.T) {
	sf := startProfileStubs(t, 1)
	h := sf.Servers()[0].Handler()
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path == "/v1/completions" {
			io.Copy(io.Discard, q.Body) // then the server sees the client go
			<-q.Context().Done()
			return
		}
		h.ServeHTTP(w, q)
	}))
	defer hung.Close()
	path := writeProfileFleet(t, []string{hung.URL}, timing.Reference)
	start := time.Now()
	code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path, "--request-timeout", "300ms"}, tinySweep...)...)
	if code != 1 || !strings.Contains(stderr, "profile e0: warm-up request: no answer in time") || !strings.Contains(stderr, "no answer within --request-timeout 300ms") {
		t.Fatalf("exit %d, expected 1 naming the timeout\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "FAILED: warm-up request") {
		t.Errorf("the output does not say the engine failed:\n%s", stdout)
	}
	t.Logf("failed after %v", time.Since(start).Round(time.Millisecond))
}

// An engine with requests running is refused (exit 1) unless --force,
// which measures it with a warning.
func TestProfileBusy(t *testing.T) {
	sf := startProfileStubs(t, 1)
	u := sf.Servers()[0].URL()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := `{"model":"stub","prompt":"a long answer","max_tokens":4000,"stream":true}`
		q, _ := http.NewRequestWithContext(ctx, http.MethodPost, u+"/v1/completions", strings.NewReader(body))
		q.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(q); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for sf.Servers()[0].Gauges().Running == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background request never ran")
		}
		time.Sleep(5 * time.Millisecond)
	}
	path := writeProfileFleet(t, []string{u}, timing.Reference)
	code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path}, tinySweep...)...)
	if code != 1 || !strings.Contains(stderr, "profile e0: busy: 1 requests running, 0 waiting") || !strings.Contains(stderr, "or pass --force") {
		t.Fatalf("busy engine: exit %d, expected 1 naming it busy\n%s%s", code, stdout, stderr)
	}
	// --force measures it: the result says it was busy (its fit may be
	// anything, even refused: exit 0 or 1).
	code, stdout, stderr = runCLI(t, append([]string{"profile", "--fleet", path, "--force"}, tinySweep...)...)
	if code == 2 || !strings.Contains(stdout, "WARNING: measured busy (--force): 1 requests running") || !strings.Contains(stdout, "  profile: {a: ") {
		t.Fatalf("--force: exit %d\n%s%s", code, stdout, stderr)
	}
}

// Ctrl-C (the context cancelled) mid-sweep ends the command at once with
// exit 130, every request and connection of its own closed.
func TestProfileInterrupt(t *testing.T) {
	sf := startProfileStubs(t, 1)
	path := writeProfileFleet(t, []string{sf.Servers()[0].URL()}, timing.Reference)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"narwhal-bench", "profile", "--fleet", path, "--prefill-lens", "32,64,128", "--prefill-repeats", "1",
			"--decode-concurrency", "4,8", "--decode-tokens", "500", "--decode-prompt", "32"}, &stdout, &stderr)
	}()
	// Cancel during the decode sweep's first wave (4 streams of 10 s),
	// streams in flight.
	deadline := time.Now().Add(30 * time.Second)
	for sf.Servers()[0].Gauges().Running < 4 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("never reached the 4-stream wave\n%s", stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	start := time.Now()
	cancel()
	var code int
	select {
	case code = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("profile did not end within 10 s of the cancel")
	}
	if code != 130 {
		t.Fatalf("exit %d, expected 130\n%s", code, stderr.String())
	}
	t.Logf("ended %v after the cancel", time.Since(start).Round(time.Millisecond))
	// The stub sees its streams cancelled, and no goroutine of the
	// command's (a stream, a connection's reader) outlives it.
	deadline = time.Now().Add(10 * time.Second)
	for sf.Servers()[0].Gauges().Running > 0 || runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before; %d streams running on the stub\n%s", runtime.NumGoroutine(), before,
				sf.Servers()[0].Gauges().Running, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gapSamples on streams whose times are known (and trimOutliers on a
// line with one stall): each stream's first gap
// and every gap begun before the last stream's first token are left
// out; the counter holds each stream's prompt from its send, one per
// token, and a stream's tokens until half a gap after its last token.
func TestProfileGapSamples(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(v float64) time.Time { return t0.Add(time.Duration(v * float64(time.Millisecond))) }
	tokens := func(at ...float64) []time.Time {
		var out []time.Time
		for _, v := range at {
			out = append(out, ms(v))
		}
		return out
	}
	// A: prompt 100, sent at 0, tokens at 10, 20, 30, 40, 50.
	// B: prompt 200, sent at 1, its first token at 20 (it joined a
	// batch late), then 30, 40, 50: its last iteration is A's.
	streams := []streamTrace{
		{prompt: 100, start: ms(0), tokens: tokens(10, 20, 30, 40, 50), end: ms(50.1)},
		{prompt: 200, start: ms(1), tokens: tokens(20.01, 30.01, 40.01, 50.01), end: ms(50.2)},
	}
	got := gapSamples(streams)
	// A's gaps 10->20 (its first) and 20->30 (begun before B's first
	// token at 20.01) are out; A's 30->40, at 40: 300 prompt + A's 4
	// tokens + B's 2 = 306; B's first gap (20.01->30.01) is out, its
	// 30.01->40.01 at 40.01: 307; A's 40->50 at 50: 308; B's
	// 40.01->50.01 at 50.01: 309, A still counted (its last token came
	// 10 µs before, out of the same iteration).
	want := []timing.Sample{{X: 306, Y: 0.010}, {X: 307, Y: 0.010}, {X: 308, Y: 0.010}, {X: 309, Y: 0.010}}
	if len(got) != len(want) {
		t.Fatalf("samples %v, expected %v", got, want)
	}
	for i := range got {
		if got[i].X != want[i].X || math.Abs(got[i].Y-want[i].Y) > 1e-9 {
			t.Fatalf("samples %v, expected %v", got, want)
		}
	}
	// A stalled gap is left out of the fit, the line through the others
	// kept.
	var line []timing.Sample
	for i := range 40 {
		x := float64(100 * (i + 1))
		line = append(line, timing.Sample{X: x, Y: 0.01 + 1e-6*x + 1e-4*float64(i%3-1)})
	}
	line[7].Y += 0.05
	keep := trimOutliers(line)
	for i, k := range keep {
		if k != (i != 7) {
			t.Fatalf("trimOutliers kept %v, expected all but sample 7", keep)
		}
	}
	// A stream with no token leaves no clean iteration.
	if got := gapSamples([]streamTrace{streams[0], {prompt: 5, start: ms(0), end: ms(3)}}); got != nil {
		t.Fatalf("samples %v with a stream of no tokens", got)
	}
}

// --write splices the fits where the old profiles were: flow by flow,
// block by block, every other byte kept; a profile written as an alias
// is refused (the copy would change the anchor's other users).
func TestProfileSplice(t *testing.T) {
	src := "name: f # c\ninstances:\n  list:\n    - {name: a, url: \"http://h:1\", profile: {a: 0, b: 1.0e-5, c: 0.001, slope: 1.0e-7, intercept: 0.002}}  # flow\n" +
		"    - name: b\n      url: \"http://h:2\"\n      profile:\n        a: 0   # x\n        b: 1.0e-5\n        c: 0.001\n        slope: 1.0e-7\n        intercept: 0.002\n      pinned: true\n" +
		"slo: {ttft: 2s, tpot: 100ms}"
	p := timing.Profile{A: 1.5e-9, B: 2e-5, C: 0.01, Slope: 2e-6, Intercept: 0.009}
	out, err := spliceProfiles([]byte(src), map[int]timing.Profile{0: p, 1: p})
	if err != nil {
		t.Fatal(err)
	}
	want := "name: f # c\ninstances:\n  list:\n    - {name: a, url: \"http://h:1\", profile: {a: 1.5e-09, b: 2e-05, c: 0.01, slope: 2e-06, intercept: 0.009}}  # flow\n" +
		"    - name: b\n      url: \"http://h:2\"\n      profile:\n        a: 1.5e-09\n        b: 2e-05\n        c: 0.01\n        slope: 2e-06\n        intercept: 0.009\n      pinned: true\n" +
		"slo: {ttft: 2s, tpot: 100ms}"
	if string(out) != want {
		t.Fatalf("spliced:\n%s\nexpected:\n%s", out, want)
	}
	spec, err := fleet.Parse(out, "spliced")
	if err != nil || spec.Profiles()[0] != p || spec.Profiles()[1] != p {
		t.Fatalf("spliced file: %v %+v", err, spec)
	}
	alias := "name: f\nx: &p {a: 0, b: 1.0e-5, c: 0.001, slope: 1.0e-7, intercept: 0.002}\ninstances:\n  list:\n    - {name: a, url: \"http://h:1\", profile: *p}\nslo: {ttft: 2s, tpot: 100ms}\n"
	if _, err := spliceProfiles([]byte(alias), map[int]timing.Profile{0: p}); err == nil || !strings.Contains(err.Error(), "not a plain mapping") {
		t.Fatalf("alias: %v", err)
	}
}

// A fleet file --write cannot edit (a profile shared through an anchor
// and an alias) is refused before anything is measured: exit 2 naming --write, with an
// engine that could not even be reached (measuring would have failed on
// it, exit 1).
func TestProfileWriteRefusedFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "alias.yaml")
	src := "name: f\ninstances:\n  list:\n    - {name: a, url: \"http://127.0.0.1:1\", profile: &p {a: 0, b: 1.0e-5, c: 0.001, slope: 1.0e-7, intercept: 0.002}}\n" +
		"    - {name: b, url: \"http://127.0.0.1:2\", profile: *p}\nslo: {ttft: 2s, tpot: 100ms}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path, "--write", filepath.Join(dir, "out.yaml")}, tinySweep...)...)
	if code != 2 || !strings.Contains(stderr, "--write") || !strings.Contains(stderr, "not a plain mapping") {
		t.Fatalf("exit %d, expected 2 naming --write and the alias\n%s%s", code, stdout, stderr)
	}
}

// Each stream event counts the tokens its usage says it brought (vLLM's
// continuous_usage_stats): a chunk whose text is empty is a token, a
// chunk that merged two is two, and its gap is two iterations; the usage
// also gives the prompt's count. Without usage, every chunk with a choice
// is one token, its text empty or not.
func TestProfileStreamEvents(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(v float64) time.Time { return t0.Add(time.Duration(v * float64(time.Millisecond))) }
	chunk := func(text string, n int) []byte {
		return []byte(fmt.Sprintf(`{"choices":[{"index":0,"text":%q}],"usage":{"prompt_tokens":40,"completion_tokens":%d,"total_tokens":%d}}`, text, n, 40+n))
	}
	var tr streamTrace
	tr.prompt = 99 // the estimate; the usage corrects it
	tr.start = ms(0)
	tr.event(ms(10), chunk("a", 1))
	tr.event(ms(20), chunk("", 2))   // empty text: still a token
	tr.event(ms(40), chunk("cd", 4)) // two tokens merged
	tr.event(ms(50), chunk("e", 5))
	tr.event(ms(50.1), []byte(`{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":5,"total_tokens":45}}`))
	if tr.prompt != 40 || tr.total() != 5 || len(tr.tokens) != 4 {
		t.Fatalf("prompt %d, %d tokens in %d events: expected 40, 5 in 4", tr.prompt, tr.total(), len(tr.tokens))
	}
	got := gapSamples([]streamTrace{tr})
	// Gaps: 10->20 (the first, out); 20->40 brought 2 tokens: 10 ms an
	// iteration at 40 + 4; 40->50: 10 ms at 45.
	want := []timing.Sample{{X: 44, Y: 0.010}, {X: 45, Y: 0.010}}
	if len(got) != len(want) {
		t.Fatalf("samples %v, expected %v", got, want)
	}
	for i := range got {
		if got[i].X != want[i].X || math.Abs(got[i].Y-want[i].Y) > 1e-9 {
			t.Fatalf("samples %v, expected %v", got, want)
		}
	}
	var plain streamTrace
	plain.event(ms(1), []byte(`{"choices":[{"index":0,"text":"a"}]}`))
	plain.event(ms(2), []byte(`{"choices":[{"index":0,"text":""}]}`))
	plain.event(ms(3), []byte(`{"choices":[]}`))
	if plain.total() != 2 || plain.counts != nil {
		t.Errorf("without usage: %d tokens (counts %v), expected 2, one an event", plain.total(), plain.counts)
	}
}

// An engine that wants an API key (vLLM's --api-key guards /v1/*) is
// refused with a pointer to the engine key flags.
func TestProfileKeyHint(t *testing.T) {
	guarded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if strings.HasPrefix(q.URL.Path, "/v1/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"Unauthorized"}`)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer guarded.Close()
	path := writeProfileFleet(t, []string{guarded.URL}, timing.Reference)
	code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path}, tinySweep...)...)
	if code == 0 || !strings.Contains(stderr, "answered 401") || !strings.Contains(stderr, "--engine-api-key-env") {
		t.Fatalf("exit %d, expected a failure naming the 401 and the key flags\n%s%s", code, stdout, stderr)
	}
}

// Without --prefill-lens, the default lengths are trimmed to an engine's
// context (an engine served with --max-model-len 2048 here), and the
// output says which were swept; a --prefill-lens past it is still bad
// input.
func TestProfileDefaultLensFitTheContext(t *testing.T) {
	sf := startProfileStubs(t, 1)
	h := sf.Servers()[0].Handler()
	short := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path != "/v1/models" {
			h.ServeHTTP(w, q)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, q)
		body := strings.Replace(rec.Body.String(), `"max_model_len":32768`, `"max_model_len":2048`, 1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	defer short.Close()
	path := writeProfileFleet(t, []string{short.URL}, timing.Reference)
	small := []string{"--prefill-repeats", "1", "--decode-concurrency", "1,2", "--decode-tokens", "4", "--decode-prompt", "32"}
	code, stdout, stderr := runCLI(t, append([]string{"profile", "--fleet", path}, small...)...)
	if code != 0 && (code != 1 || !strings.Contains(stdout, "WARNING: the fleet file refuses this fit")) {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "left out: sweeping 256,512,1024") || !strings.Contains(stdout, "T(1024)") || strings.Contains(stdout, "T(2048)") {
		t.Errorf("default lengths not trimmed to the 2048-token context:\n%s", stdout)
	}
	code, _, stderr = runCLI(t, append([]string{"profile", "--fleet", path, "--prefill-lens", "256,512,4096"}, small...)...)
	if code != 2 || !strings.Contains(stderr, "--prefill-lens: 4096 tokens") {
		t.Errorf("--prefill-lens past the context: exit %d\n%s", code, stderr)
	}
}

// A fleet file of engines not measured yet (no profiles) is refused with
// a placeholder to put in, which --write then replaces; a missing url
// names no flag profile lacks.
func TestProfileUnmeasuredFleet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "new.yaml")
	if err := os.WriteFile(path, []byte("name: new\ninstances:\n  list:\n    - {name: e0, url: \"http://127.0.0.1:1\"}\nslo: {ttft: 2s, tpot: 100ms}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "profile", "--fleet", path)
	if code != 2 || !strings.Contains(stderr, placeholderProfile) {
		t.Errorf("a fleet without profiles: exit %d, expected 2 with a placeholder to use\n%s", code, stderr)
	}
	if err := os.WriteFile(path, []byte("name: new\ninstances:\n  list:\n    - {name: e0, "+placeholderProfile+"}\nslo: {ttft: 2s, tpot: 100ms}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "profile", "--fleet", path)
	if code != 2 || !strings.Contains(stderr, "instances.list[0].url") || strings.Contains(stderr, "base-port") {
		t.Errorf("a fleet without urls: exit %d, expected 2 naming the url and no --base-port\n%s", code, stderr)
	}
}
