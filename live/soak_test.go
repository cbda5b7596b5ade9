package live

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// soakDuration is how long TestSoak runs: NWB_SOAK (a Go duration; make
// soak sets 30m), else 60 s in CI and 3 s elsewhere; under the race
// detector it is skipped (make test runs it once without).
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("NWB_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("NWB_SOAK %q: %v", s, err)
		}
		return d
	}
	if raceEnabled {
		t.Skip("the soak runs without the race detector")
	}
	if os.Getenv("CI") != "" {
		return 60 * time.Second
	}
	return 3 * time.Second
}

// rssBytes is this process's anonymous resident set (Linux; 0 elsewhere):
// the memory it allocated, without the pages of its own binary that the
// kernel maps in as code paths are first run.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "RssAnon:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// quiesce lets idle connections and finished goroutines go, then counts
// goroutines.
func quiesce(clients ...*http.Transport) int {
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	time.Sleep(300 * time.Millisecond)
	// Return freed pages to the OS now, so RSS measures what is live
	// rather than how lazily the scavenger works.
	debug.FreeOSMemory()
	if os.Getenv("NWB_SOAK_PROFILE") != "" {
		f, _ := os.Create(os.Getenv("NWB_SOAK_PROFILE"))
		pprof.WriteHeapProfile(f)
		f.Close()
	}
	return runtime.NumGoroutine()
}

// TestSoak serves a steady load of streamed and plain requests through a
// router and zero-cost stubs (static 1P1D and two-leg requests, some
// cancelled by their clients) for soakDuration, and checks that nothing
// leaks: goroutines back to the warmed-up baseline once the load stops,
// and RSS growing under 10% from the end of the warm-up to the end.
func TestSoak(t *testing.T) {
	d := soakDuration(t)
	zero := 0.0
	// The rig's in-memory journal grows by design: journal nothing here.
	// The stubs pin each handoff's blocks for their lease (30 s, as vLLM
	// does) even once pulled; a 200 ms lease keeps the engines' own state
	// flat, so what is measured is the router.
	rg := startRig(t, rigOpts{stub: stub.Options{TimeScale: &zero, Lease: 200 * time.Millisecond},
		configure: func(c *Config) { c.Recorder = event.Discard }})
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	client := &http.Client{Transport: tr}
	var served, failed atomic.Int64
	load := func(stop <-chan struct{}, workers int) {
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					stream := n%2 == 0
					body := `{"model":"stub","prompt":"soak soak soak","max_tokens":8,"stream":` + strconv.FormatBool(stream) + `}`
					q, _ := http.NewRequest("POST", rg.url+"/v1/completions", bytes.NewReader([]byte(body)))
					q.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(q)
					if err != nil {
						failed.Add(1)
						continue
					}
					if n%17 == 0 {
						resp.Body.Close() // a client that leaves early
					} else {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					if resp.StatusCode == 200 {
						served.Add(1)
					} else {
						failed.Add(1)
					}
				}
			}(w)
		}
		wg.Wait()
	}
	routerTr, _ := rg.router.cfg.Transport.(*http.Transport)
	idle := func() int {
		if routerTr != nil {
			return quiesce(tr, routerTr)
		}
		return quiesce(tr)
	}
	// Warm up: pools, buffers and maps reach their working size.
	stop := make(chan struct{})
	go func() { time.Sleep(max(d/5, 2*time.Second)); close(stop) }()
	load(stop, 8)
	g0, rss0 := idle(), rssBytes()
	start := time.Now()
	stop = make(chan struct{})
	go func() { time.Sleep(d); close(stop) }()
	load(stop, 8)
	g1, rss1 := idle(), rssBytes()
	for i := 0; i < 10 && g1 > g0; i++ { // stragglers finishing
		g1 = idle()
	}
	growth := 0.0
	if rss0 > 0 {
		growth = float64(rss1-rss0) / float64(rss0)
	}
	t.Logf("soak %v: %d requests served (%d not 200 or cut), goroutines %d -> %d, RSS %.1f -> %.1f MiB (%+.1f%%)",
		time.Since(start).Round(time.Second), served.Load(), failed.Load(), g0, g1, float64(rss0)/(1<<20), float64(rss1)/(1<<20), 100*growth)
	if g1 > g0 {
		t.Errorf("goroutines %d after the load, %d before: a leak", g1, g0)
	}
	if growth > 0.10 {
		t.Errorf("RSS grew %.1f%% (%d -> %d bytes): expected under 10%%", 100*growth, rss0, rss1)
	}
	if served.Load() == 0 {
		t.Fatal("nothing served")
	}
}
