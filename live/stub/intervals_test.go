package stub

import (
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// The interval histograms vLLM's v1 engine exports per finished request.
var intervalNames = []string{"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
	"vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds"}

// scrape reads an engine's /metrics.
func scrape(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// hsum is a histogram's count and sum in a scrape of the stub's one engine.
func hsum(t *testing.T, page, name string) (count int, sum float64) {
	t.Helper()
	for _, part := range []string{"_count", "_sum"} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+part+`{engine="0",model_name="stub"} `) + `(\S+)$`)
		m := re.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("/metrics lacks %s%s", name, part)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s%s: %v", name, part, err)
		}
		if part == "_count" {
			count = int(v)
		} else {
			sum = v
		}
	}
	return count, sum
}

// phases are the interval histograms' sums (and e2e's) after n finished
// requests, checked for what holds whatever the durations: each count n,
// queue >= 0, prefill > 0, decode >= 0, inference = prefill + decode up
// to rounding, and queue + inference within e2e.
type phases struct{ queue, prefill, decode, inference, e2e float64 }

func checkPhases(t *testing.T, who, u string, n int) phases {
	t.Helper()
	page := scrape(t, u)
	var p phases
	for i, sum := range []*float64{&p.queue, &p.prefill, &p.decode, &p.inference, &p.e2e} {
		name := "vllm:e2e_request_latency_seconds"
		if i < 4 {
			name = intervalNames[i]
		}
		c, s := hsum(t, page, name)
		if c != n {
			t.Errorf("%s: %s_count %d, want %d", who, name, c, n)
		}
		*sum = s
	}
	const eps = 1e-6
	if p.queue < 0 || p.prefill <= 0 || p.decode < 0 || math.Abs(p.inference-(p.prefill+p.decode)) > eps ||
		p.queue+p.inference > p.e2e+eps {
		t.Errorf("%s: queue %g, prefill %g, decode %g, inference %g, e2e %g: expected queue >= 0, prefill > 0, decode >= 0, inference = prefill + decode, queue + inference <= e2e",
			who, p.queue, p.prefill, p.decode, p.inference, p.e2e)
	}
	return p
}

// The four histograms carry vLLM's names, labels, help and
// request_latency_buckets; an aggregated request is observed once in
// each, its phases adding up.
func TestIntervalHistogramsAggregated(t *testing.T) {
	u := startFleet(t, 1, Options{}).Servers()[0].URL()
	page := scrape(t, u)
	help := map[string]string{"queue": "WAITING", "prefill": "PREFILL", "decode": "DECODE", "inference": "RUNNING"}
	for _, name := range intervalNames {
		phase := strings.TrimSuffix(strings.TrimPrefix(name, "vllm:request_"), "_time_seconds")
		if !regexp.MustCompile(`(?m)^# HELP `+name+` Time spent in `+help[phase]+` phase`).MatchString(page) ||
			!strings.Contains(page, "# TYPE "+name+" histogram\n") {
			t.Errorf("%s: help or type missing:\n%s", name, grep([]byte(page), "# HELP "+name))
		}
		var les []string
		for _, m := range regexp.MustCompile(`(?m)^`+name+`_bucket\{engine="0",model_name="stub",le="([^"]+)"\} 0$`).FindAllStringSubmatch(page, -1) {
			les = append(les, m[1])
		}
		var want []string
		for _, b := range requestBuckets {
			want = append(want, strconv.FormatFloat(b, 'g', -1, 64))
		}
		want = append(want, "+Inf")
		if strings.Join(les, " ") != strings.Join(want, " ") {
			t.Errorf("%s buckets %v, want vLLM's %v", name, les, want)
		}
	}
	if r := post(t, u+"/v1/completions", `{"prompt":"some prompt text","max_tokens":5}`); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	p := checkPhases(t, "aggregated", u, 1)
	if p.decode <= 0 {
		t.Errorf("aggregated: decode %g: expected > 0 over 4 decode iterations", p.decode)
	}
}

// A prefill/decode pair: each instance records what vLLM would record on
// it. The prefill leg ends with its first token (decode 0, inference =
// prefill); the decode leg is scheduled when it joins the running batch
// after its KV pull, and decodes its tokens 2 to 6.
func TestIntervalHistogramsPrefillDecode(t *testing.T) {
	f := startFleet(t, 2, Options{})
	p, d := f.Servers()[0], f.Servers()[1]
	h := prefill(t, p.URL(), "pd")
	if r := decodeLeg(t, d.URL(), "pd", h); r.status != 200 || len(events(t, r.body)) != 7 {
		t.Fatalf("decode leg: %d %s", r.status, r.body)
	}
	pp := checkPhases(t, "prefill leg", p.URL(), 1)
	if pp.decode != 0 || pp.inference != pp.prefill {
		t.Errorf("prefill leg: decode %g, inference %g, prefill %g: expected decode 0 and inference = prefill", pp.decode, pp.inference, pp.prefill)
	}
	dp := checkPhases(t, "decode leg", d.URL(), 1)
	if dp.decode <= 0 {
		t.Errorf("decode leg: decode %g: expected > 0 over tokens 2 to 6", dp.decode)
	}
}

// Under preemption (recompute) every request is still observed once and
// its phases add up.
func TestIntervalHistogramsPreemption(t *testing.T) {
	u := startTightKV(t, 0.02)
	body := `{"prompt":` + idPrompt(100) + `,"max_tokens":80}`
	done := make(chan int)
	for range 6 {
		go func() {
			r, _ := postRaw(t, u+"/v1/completions", body)
			done <- r.status
		}()
	}
	for range 6 {
		if st := <-done; st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	page := scrape(t, u)
	if m := regexp.MustCompile(`(?m)^vllm:num_preemptions_total\{engine="0",model_name="stub"\} (\d+)$`).FindStringSubmatch(page); m == nil || m[1] == "0" {
		t.Fatalf("no preemption: %v", m)
	}
	checkPhases(t, "preempted", u, 6)
}

// A prompt is scheduled when its first chunk runs, not when its prefill
// ends; a prompt queued behind it is not scheduled until it begins.
func TestPromptScheduledAtFirstChunk(t *testing.T) {
	// One 16-token chunk per iteration: a 2048-token prompt prefills over
	// 128 iterations, the next prompt waits for all of them.
	s, err := NewServer(Options{TimeScale: scale(1)}, Instance{ID: "e0",
		Engine: engine.Config{Profile: timing.Reference, Batch: engine.Batch{ChunkTokens: 16, BudgetTokens: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	a := newLive(s.nextID.Add(1), 2048, 2)
	b := newLive(s.nextID.Add(1), 2048, 2)
	s.submit(cmd{kind: cmdPrefill, r: a})
	s.submit(cmd{kind: cmdPrefill, r: b})
	read := func(l *live) (sched, first time.Time, done bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.scheduled, l.firstHere, l.done
	}
	waitFor(t, "the first prompt to begin", func() bool { g := s.Gauges(); return g.Started == 1 && g.Prefill == 2 })
	// The gauges said: a begun, b not (and so a not yet done, b not begun).
	if sched, _, _ := read(a); sched.IsZero() {
		t.Errorf("prompt a begun but not scheduled")
	}
	if sched, _, _ := read(b); !sched.IsZero() {
		t.Errorf("prompt b scheduled before it began")
	}
	waitFor(t, "both done", func() bool { _, _, da := read(a); _, _, db := read(b); return da && db })
	sa, fa, _ := read(a)
	sb, fb, _ := read(b)
	if !sa.Before(fa) || fa.After(sb) || !sb.Before(fb) || sa.Before(a.start) {
		t.Errorf("a scheduled %v, first token %v; b scheduled %v, first token %v: expected in that order",
			sa.Sub(a.start), fa.Sub(a.start), sb.Sub(a.start), fb.Sub(a.start))
	}
}
