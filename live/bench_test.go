package live

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
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
// that port and the next, says "ready" on stdout, runs the streaming
// clients stdin asks for (streamClients), and exits when stdin closes.
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
	streamClients(os.Stdin, os.Stdout) // until the parent closes stdin (or dies)
	return 0
}

// streamClients runs long streams for the parent, one command a line on
// in, each answered with one line on out: "open URL N BODY" opens N
// streams, each POSTing BODY (JSON) to URL and reading its events, and
// answers "ok"; "count" answers "STARTED READ": the streams that have
// their first token, and the token-bearing events read by all of them;
// "close" ends them and answers "ok" once they ended. In the child
// process the clients' CPU is not the parent's, whose CPU is then the
// relay's (BenchmarkRouterPerToken).
func streamClients(in io.Reader, out io.Writer) {
	var started, read atomic.Int64
	var wg sync.WaitGroup
	stop := func() {}
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		cmd, args, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "open":
			f := strings.SplitN(args, " ", 3)
			n, _ := strconv.Atoi(f[1])
			c := benchClient(n)
			ctx, cancel := context.WithCancel(context.Background())
			stop = cancel
			started.Store(0)
			read.Store(0)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					q, _ := http.NewRequestWithContext(ctx, http.MethodPost, f[0], strings.NewReader(f[2]))
					q.Header.Set("Content-Type", "application/json")
					resp, err := c.Do(q)
					if err != nil {
						return
					}
					defer resp.Body.Close()
					sr := api.NewSSEReader(resp.Body)
					for first := true; ; {
						p, done, err := sr.ReadEvent()
						if err != nil || done {
							return
						}
						if bytes.Contains(p, []byte(`"text":"`)) {
							if first {
								started.Add(1)
								first = false
							}
							read.Add(1)
						}
					}
				}()
			}
			fmt.Fprintln(out, "ok")
		case "count":
			fmt.Fprintln(out, started.Load(), read.Load())
		case "close":
			stop()
			wg.Wait()
			fmt.Fprintln(out, "ok")
		default:
			fmt.Fprintln(out, "unknown command", cmd)
		}
	}
	stop()
}

// benchRouter runs a router over overheadFleet's engines at urls (the
// byPrompt controller, a transport sized for streams), serves it on
// loopback and returns it and its URL; both stop when b ends.
func benchRouter(b *testing.B, urls []string, streams int) (*Router, string) {
	spec, err := fleet.Parse([]byte(overheadFleet), "overhead.yaml")
	if err != nil {
		b.Fatal(err)
	}
	rt, err := New(Config{Fleet: spec, URLs: urls, Controller: byPrompt{}, Model: "stub",
		Transport: benchClient(streams).Transport})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-ran
	})
	return rt, benchServe(b, rt.Handler()) // its cleanup runs first: the server closes before the router stops
}

// benchServe serves h on loopback until b ends and returns its URL.
func benchServe(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// stubProcess starts the overhead fleet's stubs in a child process and
// returns their base URLs.
func stubProcess(b *testing.B) []string {
	urls, _ := stubProcessCmd(b)
	return urls
}

// stubProcessCmd is stubProcess, also returning a function that sends the
// child one streamClients command and returns its answer.
func stubProcessCmd(b *testing.B) ([]string, func(cmd string) string) {
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
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("stub process: %q %v", line, err)
	}
	urls := []string{fmt.Sprintf("http://127.0.0.1:%d", base), fmt.Sprintf("http://127.0.0.1:%d", base+1)}
	return urls, func(cmd string) string {
		if _, err := fmt.Fprintln(stdin, cmd); err != nil {
			b.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil {
			b.Fatalf("stub process, %.20q: %v", cmd, err)
		}
		return strings.TrimSuffix(line, "\n")
	}
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
			urls := stubProcess(b)
			c := benchClient(streams)
			rt, routerURL := benchRouter(b, urls, streams)
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

// BenchmarkRouterPerToken: the CPU the router spends per streamed token,
// against a plain net/http/httputil.ReverseProxy relaying the same
// streams. The engine is overheadFleet's "paced" stub (one token per
// stream every 50 ms, as a real decode paces them, so every token is an
// event of its own), and the clients read its streams, in a child
// process; this process holds only the router and the reverse proxy, so
// its CPU is the relay's. The same 256 long streams are read through the
// reverse proxy and through the router in alternating windows (six
// rounds). Reported: router-cpu-ns/token and proxy-cpu-ns/token (this
// process's CPU over the tokens the clients read in the windows through
// each), and their ratio router/proxy; b.N is the tokens read per path
// (at least 30,000).
func BenchmarkRouterPerToken(b *testing.B) {
	const streams = 256
	urls, child := stubProcessCmd(b)
	rt, routerURL := benchRouter(b, urls, streams)
	paced, err := url.Parse(urls[1])
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(paced)
	rp.Transport = benchClient(streams).Transport
	proxyURL := benchServe(b, rp)
	long := `{"model":"stub","prompt":"` + strings.Repeat("back ground ", 40) + `","max_tokens":20000,"min_tokens":20000,"stream":true}`
	count := func() (started, read int64) {
		if _, err := fmt.Sscan(child("count"), &started, &read); err != nil {
			b.Fatal(err)
		}
		return
	}
	// window opens the streams through base, waits until every stream has
	// its first token, counts this process's CPU over the next tokens
	// tokens read, and closes the streams.
	check := benchClient(1)
	window := func(base string, tokens int64) (time.Duration, int64) {
		child(fmt.Sprintf("open %s/v1/completions %d %s", base, streams, long))
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if n, _ := count(); n == streams {
				break
			} else if time.Now().After(deadline) {
				b.Fatalf("%s: %d of %d streams started after 30 s", base, n, streams)
			}
		}
		_, n0 := count()
		c0 := cpuTime()
		n := n0
		for n-n0 < tokens {
			time.Sleep(50 * time.Millisecond)
			_, n = count()
		}
		cpu := cpuTime() - c0
		child("close")
		// Let the engine and the router see the streams go before the
		// next window.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, _ := rt.State()
			if running(check, urls[1]) == 0 && st.Counts.InFlight == 0 {
				break
			} else if time.Now().After(deadline) {
				b.Fatalf("%s: streams still open 30 s after the clients left", base)
			}
		}
		return cpu, n - n0
	}
	total := int64(max(b.N, 30000))
	const rounds = 6
	var cpu [2]time.Duration
	var got [2]int64
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		for k, base := range []string{proxyURL, routerURL} {
			dc, dn := window(base, total/rounds)
			cpu[k] += dc
			got[k] += dn
		}
	}
	b.StopTimer()
	proxy := float64(cpu[0].Nanoseconds()) / float64(got[0])
	router := float64(cpu[1].Nanoseconds()) / float64(got[1])
	b.ReportMetric(router, "router-cpu-ns/token")
	b.ReportMetric(proxy, "proxy-cpu-ns/token")
	b.ReportMetric(router/proxy, "router/proxy")
}
