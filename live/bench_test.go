package live

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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

// overheadFleet is the overhead benchmark's two engines: "probe" costs
// nothing, "paced" runs one decode iteration every 50 ms.
const overheadFleet = `name: overhead
instances:
  list:
    - {name: probe, profile: {a: 0, b: 0, c: 1.0e-9, slope: 0, intercept: 1.0e-9}}
    - {name: paced, profile: {a: 0, b: 0, c: 1.0e-9, slope: 0, intercept: 0.05}}
slo: {ttft: 2s, tpot: 100ms}
batch: {chunk_tokens: 2048, budget_tokens: 65536}
`

// TestMain lets the overhead benchmark run its stub engines as a separate
// process (as vllm-project/router's method runs its mock workers): with
// NWB_BENCH_STUB_PORT set, this binary serves overheadFleet's stubs at
// that port and the next, says "ready" on stdout, and exits when stdin
// closes.
func TestMain(m *testing.M) {
	if port := os.Getenv("NWB_BENCH_STUB_PORT"); port != "" {
		os.Exit(stubChild(port))
	}
	os.Exit(m.Run())
}

func stubChild(port string) int {
	base, err := strconv.Atoi(port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	spec, err := fleet.Parse([]byte(overheadFleet), "overhead.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opts := stub.Options{Model: "stub", TimeScale: one()}
	insts, err := stub.FromFleet(spec, base, &opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f, err := stub.NewFleet(opts, insts)
	if err == nil {
		err = f.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) // until the parent closes it (or dies)
	return 0
}

// stubProcess starts the overhead fleet's stubs in a child process and
// returns their base URLs.
func stubProcess(b *testing.B) []string {
	b.Helper()
	var base int
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		base = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+1)); err == nil {
			l2.Close()
			break
		}
		if try > 50 {
			b.Fatal("no two free ports")
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("NWB_BENCH_STUB_PORT=%d", base), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line := make([]byte, 6)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "ready\n" {
		b.Fatalf("stub process: %q %v", line, err)
	}
	return []string{fmt.Sprintf("http://127.0.0.1:%d", base), fmt.Sprintf("http://127.0.0.1:%d", base+1)}
}

// running reads vllm:num_requests_running from an engine's /metrics.
func running(c *http.Client, url string) int {
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "vllm:num_requests_running") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return int(v)
		}
	}
	return -1
}

// BenchmarkRouterOverhead: the router's added TTFT with N streams open
// through it, following vllm-project/router's router-overhead method: mock
// engines in their own process (the stub engines of overheadFleet), the
// router and the clients in this one. Engine "paced" holds N-1 long
// streams, one token per stream every 50 ms as a real decode paces them,
// relayed through the router; engine "probe" costs nothing and answers
// the probes, sent one at a time, alternately through the router and
// straight to the engine, so both paths see the same background. Reported:
// added TTFT at p50 and p99 (router minus direct), the router's CPU per
// 1,000 probe requests (this process's CPU during the routed probes minus
// during the direct ones), and this process's RSS with the streams open
// (router and clients). b.N is the probes per path (at least 2,000, so
// that p99 is the 20th worst, not the 4th).
func BenchmarkRouterOverhead(b *testing.B) {
	for _, streams := range []int{1, 64, 1000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			spec, err := fleet.Parse([]byte(overheadFleet), "overhead.yaml")
			if err != nil {
				b.Fatal(err)
			}
			urls := stubProcess(b)
			c := benchClient(streams)
			rt, err := New(Config{Fleet: spec, URLs: urls, Controller: byPrompt{}, Model: "stub",
				Transport: benchClient(streams).Transport})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- rt.Run(ctx) }()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: rt.Handler()}
			go srv.Serve(ln)
			routerURL := "http://" + ln.Addr().String()
			defer func() {
				srv.Close()
				cancel()
				<-ran
			}()
			bgCtx, stopBG := context.WithCancel(context.Background())
			var bg sync.WaitGroup
			long := []byte(`{"model":"stub","prompt":"` + strings.Repeat("back ground ", 40) + `","max_tokens":20000,"min_tokens":20000,"stream":true}`)
			for i := 0; i < streams-1; i++ {
				bg.Add(1)
				go func() {
					defer bg.Done()
					q, _ := http.NewRequestWithContext(bgCtx, http.MethodPost, routerURL+"/v1/completions", bytes.NewReader(long))
					resp, err := c.Do(q)
					if err != nil {
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}()
			}
			for deadline := time.Now().Add(30 * time.Second); ; {
				if n := running(c, urls[1]); n >= streams-1 && n >= 0 {
					break
				} else if time.Now().After(deadline) {
					b.Fatalf("the paced engine streams %d of the %d background requests after 30 s", n, streams-1)
				}
				time.Sleep(20 * time.Millisecond)
			}
			probe := []byte(`{"model":"stub","prompt":"a probe","max_tokens":4,"stream":true}`)
			direct := urls[0] + "/v1/completions"
			routed := routerURL + "/v1/completions"
			n := max(b.N, 2000)
			for i := 0; i < 50; i++ { // warm both paths
				ttftOnce(c, direct, probe)
				ttftOnce(c, routed, probe)
			}
			var d, rts []time.Duration
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
						rts, rcpu = append(rts, x), rcpu+cpuTime()-c0
					}
				}
			}
			b.StopTimer()
			rss := rssMiB()
			if st, _ := rt.State(); st.Counts.InFlight < streams-1 {
				b.Fatalf("background streams ended early: %+v", st.Counts)
			}
			stopBG()
			bg.Wait()
			ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
			b.ReportMetric(ms(pct(rts, 0.5)-pct(d, 0.5)), "added-ttft-p50-ms")
			b.ReportMetric(ms(pct(rts, 0.99)-pct(d, 0.99)), "added-ttft-p99-ms")
			b.ReportMetric(ms(pct(d, 0.5)), "direct-ttft-p50-ms")
			b.ReportMetric(ms(pct(rts, 0.5)), "routed-ttft-p50-ms")
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
