package live

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// phase runs total requests over streams concurrent clients against url
// and returns each request's TTFT and the process CPU time used.
func phase(b *testing.B, c *http.Client, url string, body []byte, streams, total int) ([]time.Duration, time.Duration) {
	b.Helper()
	var next atomic.Int64
	out := make([]time.Duration, total)
	var wg sync.WaitGroup
	var failed atomic.Value
	cpu0 := cpuTime()
	for w := 0; w < streams; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				d, err := ttftOnce(c, url, body)
				if err != nil {
					failed.Store(err)
					return
				}
				out[i] = d
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	return out, cpuTime() - cpu0
}

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

// BenchmarkRouterOverhead: added TTFT of the router over a direct request
// (one engine, aggregated arm: the router's hop and its core decisions,
// one leg), at 1, 64 and 1,000 concurrent streams; the router's added CPU
// per 1,000 requests and the process RSS with 1,000 streams open. b.N
// scales the requests per phase (at least 4 per stream).
func BenchmarkRouterOverhead(b *testing.B) {
	for _, streams := range []int{1, 64, 1000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			r := startRig(b, rigOpts{n: 1, arm: "aggregated", stub: stub.Options{TimeScale: zero()},
				configure: func(c *Config) { c.Transport = benchClient(streams).Transport }})
			c := benchClient(streams)
			body := []byte(`{"model":"stub","prompt":"a short prompt of a few words","max_tokens":4,"stream":true}`)
			total := max(b.N, 4*streams, 200)
			direct := r.stubs.Servers()[0].URL() + "/v1/completions"
			routed := r.url + "/v1/completions"
			phase(b, c, direct, body, streams, min(total, 200)) // warm both paths' connections
			phase(b, c, routed, body, streams, min(total, 200))
			b.ResetTimer()
			d, dcpu := phase(b, c, direct, body, streams, total)
			rt, rcpu := phase(b, c, routed, body, streams, total)
			b.StopTimer()
			rss := rssMiB()
			ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
			b.ReportMetric(ms(pct(rt, 0.5)-pct(d, 0.5)), "added-ttft-p50-ms")
			b.ReportMetric(ms(pct(rt, 0.99)-pct(d, 0.99)), "added-ttft-p99-ms")
			b.ReportMetric(ms(pct(d, 0.5)), "direct-ttft-p50-ms")
			b.ReportMetric(ms(pct(rt, 0.5)), "routed-ttft-p50-ms")
			b.ReportMetric(ms(rcpu-dcpu)*1000/float64(total), "router-cpu-ms/1k-req")
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
