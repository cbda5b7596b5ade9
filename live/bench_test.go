package live

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// The router benchmarks follow vllm-project/router's router-overhead
// method: mock engines that cost nothing (a zero-cost stub profile), the
// same requests sent through the router and straight to the engine, and
// the difference reported. Router, stubs and load generator share this
// process and its cores (GOMAXPROCS), so the figures include the load
// generator's and the stubs' share of the CPU.

// benchClient is a keep-alive client sized for many streams.
func benchClient(streams int) *http.Client {
	t := NewTransport()
	t.MaxIdleConnsPerHost = streams + 16
	return &http.Client{Transport: t}
}

// ttftOnce sends one streamed completion and returns the time to its first
// token-bearing event, reading the stream to its end.
func ttftOnce(c *http.Client, url string, body []byte) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sr := api.NewSSEReader(resp.Body)
	var first time.Duration
	for {
		p, done, err := sr.ReadEvent()
		if err != nil {
			return 0, err
		}
		if done {
			return first, nil
		}
		if first == 0 && bytes.Contains(p, []byte(`"text":"`)) && !bytes.Contains(p, []byte(`"text":""`)) {
			first = time.Since(start)
		}
	}
}

func one() *float64 { x := 1.0; return &x }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssMiB is the process's resident set now.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(p*float64(len(s))+0.5) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// byPrompt is a benchmark controller over two mixed engines: prompts of
// fewer than 16 tokens (the probes) go to engine 0, the rest to engine 1.
type byPrompt struct{}

func (byPrompt) Name() string { return "by-prompt" }
func (byPrompt) Init(v *core.View) error {
	v.SetRole(0, event.RoleMixed)
	v.SetRole(1, event.RoleMixed)
	return nil
}
func (byPrompt) PlacePrefill(_ *core.View, r core.Request) (event.Instance, event.Cause) {
	if r.InputTokens < 16 {
		return 0, event.CauseNone
	}
	return 1, event.CauseNone
}
func (byPrompt) PlaceDecode(_ *core.View, r core.Request) event.Instance { return r.PrefillInst }
func (byPrompt) Tick(*core.View) bool                                    { return false }
func (byPrompt) NextTick() event.Time                                    { return event.Never }

// BenchmarkRouterOverhead: the router's added TTFT with N streams open
// through it. Engine 1 holds N-1 long streams, paced as a real decode is
// (one token per stream every 50 ms), relayed through the router; engine 0
// costs nothing and answers the probes, sent one at a time, alternately
// through the router and straight to the engine, so both paths see the
// same background. Reported: added TTFT at p50 and p99 (router minus
// direct), the router's CPU per 1,000 probe requests (CPU of the routed
// probes minus the direct ones), and the process RSS with the streams open.
// b.N is the probes per path (at least 2,000, so that p99 is the 20th
// worst, not the 4th).
func BenchmarkRouterOverhead(b *testing.B) {
	for _, streams := range []int{1, 64, 1000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			spec, err := fleet.Parse([]byte(`name: overhead
instances:
  list:
    - {name: probe, profile: {a: 0, b: 0, c: 1.0e-9, slope: 0, intercept: 1.0e-9}}
    - {name: paced, profile: {a: 0, b: 0, c: 1.0e-9, slope: 0, intercept: 0.05}}
slo: {ttft: 2s, tpot: 100ms}
batch: {chunk_tokens: 2048, budget_tokens: 65536}
`), "overhead.yaml")
			if err != nil {
				b.Fatal(err)
			}
			r := startRigSpec(b, spec, rigOpts{ctrl: byPrompt{}, stub: stub.Options{TimeScale: one()},
				configure: func(c *Config) { c.Transport = benchClient(streams).Transport }})
			c := benchClient(streams)
			bgCtx, stopBG := context.WithCancel(context.Background())
			var bg sync.WaitGroup
			long := []byte(`{"model":"stub","prompt":"` + strings.Repeat("back ground ", 40) + `","max_tokens":20000,"min_tokens":20000,"stream":true}`)
			for i := 0; i < streams-1; i++ {
				bg.Add(1)
				go func() {
					defer bg.Done()
					q, _ := http.NewRequestWithContext(bgCtx, http.MethodPost, r.url+"/v1/completions", bytes.NewReader(long))
					resp, err := c.Do(q)
					if err != nil {
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}()
			}
			// Wait until every background stream is open.
			for deadline := time.Now().Add(30 * time.Second); ; {
				g := r.stubs.Servers()[1].Gauges()
				if g.Running >= streams-1 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("the paced engine streams %d of the %d background requests after 30 s", g.Running, streams-1)
				}
				time.Sleep(10 * time.Millisecond)
			}
			probe := []byte(`{"model":"stub","prompt":"a probe","max_tokens":4,"stream":true}`)
			direct := r.stubs.Servers()[0].URL() + "/v1/completions"
			routed := r.url + "/v1/completions"
			n := max(b.N, 2000)
			for i := 0; i < 50; i++ { // warm both paths
				ttftOnce(c, direct, probe)
				ttftOnce(c, routed, probe)
			}
			var d, rt []time.Duration
			var dcpu, rcpu time.Duration
			b.ResetTimer()
			for i := 0; i < n; i++ {
				for _, path := range []string{direct, routed} {
					c0 := cpuTime()
					x, err := ttftOnce(c, path, probe)
					if err != nil {
						b.Fatal(err)
					}
					if path == direct {
						d, dcpu = append(d, x), dcpu+cpuTime()-c0
					} else {
						rt, rcpu = append(rt, x), rcpu+cpuTime()-c0
					}
				}
			}
			b.StopTimer()
			rss := rssMiB()
			if f := os.Getenv("NWB_HEAP_PROFILE"); f != "" {
				if out, err := os.Create(f); err == nil {
					runtime.GC()
					pprof.WriteHeapProfile(out)
					out.Close()
				}
			}
			if st, _ := r.router.State(); st.Counts.InFlight < streams-1 {
				b.Fatalf("background streams ended early: %+v", st.Counts)
			}
			stopBG()
			bg.Wait()
			ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
			b.ReportMetric(ms(pct(rt, 0.5)-pct(d, 0.5)), "added-ttft-p50-ms")
			b.ReportMetric(ms(pct(rt, 0.99)-pct(d, 0.99)), "added-ttft-p99-ms")
			b.ReportMetric(ms(pct(d, 0.5)), "direct-ttft-p50-ms")
			b.ReportMetric(ms(pct(rt, 0.5)), "routed-ttft-p50-ms")
			b.ReportMetric(ms(rcpu-dcpu)*1000/float64(n), "router-cpu-ms/1k-req")
			b.ReportMetric(rss, "rss-MiB")
		})
	}
}

// BenchmarkRouterThroughput: short requests (2 output tokens, not
// streamed) through a 1P1D split, two legs each (prefill with the KV
// handoff, then decode), from 128 concurrent clients; reports completed
// requests per second.
func BenchmarkRouterThroughput(b *testing.B) {
	const clients = 128
	r := startRig(b, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) { c.Transport = benchClient(clients).Transport }})
	c := benchClient(clients)
	body := []byte(`{"model":"stub","prompt":"short","max_tokens":2,"min_tokens":2}`)
	url := r.url + "/v1/completions"
	total := max(b.N, 20000)
	send := func(n int) {
		var next atomic.Int64
		var wg sync.WaitGroup
		var bad atomic.Int64
		for w := 0; w < clients; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for int(next.Add(1)) <= n {
					resp, err := c.Post(url, "application/json", bytes.NewReader(body))
					if err != nil {
						bad.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						bad.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if bad.Load() > 0 {
			b.Fatalf("%d of %d requests failed", bad.Load(), n)
		}
	}
	send(2000) // warm up
	b.ResetTimer()
	start := time.Now()
	send(total)
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(total)/el.Seconds(), "req/s")
}
