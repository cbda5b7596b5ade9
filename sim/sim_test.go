package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	eng "github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

func refConfig(n int) Config {
	ps := make([]timing.Profile, n)
	for i := range ps {
		ps[i] = timing.Reference
	}
	return Config{Profiles: ps, SLO: event.SLO{TTFT: 10 * event.Second, TPOT: 125 * event.Millisecond}, KV: timing.FlatKV, Batch: DefaultBatch}
}

func mustController(t testing.TB, arm string, n int) core.Controller {
	t.Helper()
	c, err := core.NewController(arm, n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tokenLog records every token's time per request.
type tokenLog map[event.RequestID][]event.Time

func (l tokenLog) hook(req event.RequestID, k int, at event.Time) {
	ts := l[req]
	if k != len(ts)+1 {
		panic(fmt.Sprintf("request %d: token %d reported after %d tokens", req, k, len(ts)))
	}
	l[req] = append(ts, at)
}

// One request on an idle 1P1D fleet: its first token comes exactly T(n)
// after it arrives, the KV moves in the flat 50 ms, and every later gap is
// the decode interval at the batch's context then (Arrow §3.1).
func TestSingleRequestClosedForm(t *testing.T) {
	cfg := refConfig(2)
	log := tokenLog{}
	cfg.TokenHook = log.hook
	in, out := 1000, 20
	reqs := []Request{{At: event.Second, InputTokens: in, OutputTokens: out}}
	s, err := New(cfg, mustController(t, "static:1P1D", 2), reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(); err != nil {
		t.Fatal(err)
	}
	ts := log[1]
	if len(ts) != out {
		t.Fatalf("%d tokens, want %d", len(ts), out)
	}
	p := timing.Reference
	if got, want := ts[0]-event.Second, event.Seconds(p.Prefill(in)); got != want {
		t.Errorf("TTFT %v (%d ns), want T(%d) = %d ns", got, got, in, want)
	}
	// Token 2 waits for the KV (50 ms), then one iteration over input+1 tokens.
	want2 := event.Seconds(0.05) + event.Seconds(p.Interval(int64(in+1)))
	if d := ts[1] - ts[0]; abs(d-want2) > 1 {
		t.Errorf("gap 1->2 = %d ns, want %d", d, want2)
	}
	for k := 2; k < out; k++ {
		want := event.Seconds(p.Interval(int64(in + k)))
		if d := ts[k] - ts[k-1]; abs(d-want) > 1 {
			t.Errorf("gap %d->%d = %d ns, want I(%d) = %d ns", k, k+1, d, in+k, want)
		}
	}
}

func abs(t event.Time) event.Time {
	if t < 0 {
		return -t
	}
	return t
}

// A saturated prefill engine completes prompts at the profile's rate: with
// every prompt one chunk long, an iteration prices each at T(n), so n-token
// prompts finish at 1/T(n) per second (Arrow §3.1).
func TestSaturatedPrefillThroughput(t *testing.T) {
	cfg := refConfig(2)
	n, count := 2048, 800
	reqs := make([]Request, count)
	for i := range reqs {
		reqs[i] = Request{InputTokens: n, OutputTokens: 1}
	}
	st, rows := runChecked(t, cfg, "static:1P1D", reqs)
	if st.Finished != count {
		t.Fatalf("finished %d of %d", st.Finished, count)
	}
	var last event.Time
	for _, r := range rows {
		last = max(last, r.End)
	}
	want := float64(count) * timing.Reference.Prefill(n)
	if got := last.Seconds(); got < want-1e-6 || got > want+1e-6 {
		t.Fatalf("last prompt done at %.6fs, want %d x T(%d) = %.6fs", got, count, n, want)
	}
}

// A saturated decode engine produces tokens at the profile's rate: 64
// streams that join together run every iteration at I(context), and the
// context grows by 64 tokens per iteration (Arrow §3.1).
func TestSaturatedDecodeThroughput(t *testing.T) {
	cfg := refConfig(2)
	m, in, out := 64, 100, 200
	reqs := make([]Request, m)
	for i := range reqs {
		reqs[i] = Request{InputTokens: in, OutputTokens: out}
	}
	_, rows := runChecked(t, cfg, "static:1P1D", reqs)
	p := timing.Reference
	prefill := float64(m) * p.Prefill(in) // one iteration holds all 64 prompts
	want := prefill + 0.05
	for k := 0; k < out-1; k++ {
		want += p.Interval(int64(m*(in+1) + m*k))
	}
	for _, r := range rows {
		if r.FirstToken != event.Seconds(prefill) {
			t.Fatalf("request %d: first token %v, want %.6fs", r.Req, r.FirstToken, prefill)
		}
		if d := r.End.Seconds() - want; d < -2e-9 || d > 2e-9 {
			t.Fatalf("request %d: last token %.9fs, want %.9fs", r.Req, r.End.Seconds(), want)
		}
	}
}

// A cross-instance decode leg never starts before its first token exists:
// the reference stamped token 2 before token 1 (narwhal-core §0 item 5).
func TestCausalityUnderLoad(t *testing.T) {
	cfg := refConfig(8)
	reqs := randomTrace(11, 2000, 12)
	runChecked(t, cfg, "static:4P4D", reqs) // the checker fails on any violation
}

// BenchmarkRun simulates 100,000 requests on 8 instances (static 4P4D) and
// reports simulated requests per wall-second.
func BenchmarkRun(b *testing.B) {
	reqs := randomTrace(5, 100000, 6)
	cfg := refConfig(8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := New(cfg, mustController(b, "static:4P4D", 8), reqs, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(reqs)*b.N)/b.Elapsed().Seconds(), "requests/s")
}

// Prefix caching: a prompt whose group this engine has cached skips the
// cached blocks; its prefill costs T(n) − T(cached). With the cache off, or
// on another engine, it pays the whole T(n).
func TestPrefixCache(t *testing.T) {
	cfg := refConfig(2)
	cfg.Cache = PrefixCache{Enabled: true, PrefixCache: eng.PrefixCache{BlockTokens: 16, CapacityTokens: 100000}}
	reqs := []Request{
		{At: 0, InputTokens: 6000, OutputTokens: 1, PrefixGroup: 7, PrefixTokens: 5010},
		{At: 10 * event.Second, InputTokens: 6500, OutputTokens: 1, PrefixGroup: 7, PrefixTokens: 5010},
	}
	_, rows := runChecked(t, cfg, "static:1P1D", reqs)
	p := timing.Reference
	cached := 5008 // whole 16-token blocks of the 5010 shared tokens
	if rows[1].CachedTokens != int64(cached) {
		t.Fatalf("cached tokens %d, want %d", rows[1].CachedTokens, cached)
	}
	want := event.Seconds(p.Prefill(6500) - p.Prefill(cached))
	if got := rows[1].FirstToken - rows[1].Scheduled; got != want {
		t.Fatalf("cached prefill took %v, want T(6500)-T(%d) = %v", got, cached, want)
	}
	cfg.Cache.Enabled = false
	_, rows = runChecked(t, cfg, "static:1P1D", reqs)
	if rows[1].CachedTokens != 0 || rows[1].FirstToken-rows[1].Scheduled != event.Seconds(p.Prefill(6500)) {
		t.Fatalf("cache off: cached %d, TTFT %v", rows[1].CachedTokens, rows[1].TTFT())
	}
}

// The cache keeps whole blocks, refreshes on use and evicts the least
// recently used group beyond its capacity.
func TestPrefixCacheLRU(t *testing.T) {
	c := newPrefixCache(PrefixCache{Enabled: true, PrefixCache: eng.PrefixCache{BlockTokens: 10, CapacityTokens: 100}})
	c.insert(1, 45) // 40 tokens
	c.insert(2, 50) // 50 tokens: 90 used
	if c.lookup(1, 1000) != 40 {
		t.Fatal("group 1 not cached as 40 tokens")
	}
	c.insert(3, 30) // 120 > 100: evicts group 2, the least recently used
	if c.lookup(2, 100) != 0 || c.lookup(1, 100) != 40 || c.lookup(3, 25) != 20 || c.used != 70 {
		t.Fatalf("after eviction: used %d", c.used)
	}
	c.insert(4, 500) // larger than the whole cache: not kept
	if c.lookup(4, 500) != 0 {
		t.Fatal("an entry larger than the cache was kept")
	}
}

// A group inserted after the one whose blocks it extends (a
// conversation's turn after the turn before) costs only its own blocks,
// and reading it keeps the entry it extends more recent, so the least
// recently used tail goes first and the shared prefix stays.
func TestPrefixCacheExtends(t *testing.T) {
	c := newPrefixCache(PrefixCache{Enabled: true, PrefixCache: eng.PrefixCache{BlockTokens: 10, CapacityTokens: 100}})
	c.insert(1, 40)
	c.insertAfter(2, 60, 1) // extends 1: 20 more
	c.insertAfter(3, 70, 2) // extends 2: 10 more
	if c.used != 70 || c.lookup(3, 1000) != 70 || c.lookup(2, 1000) != 60 {
		t.Fatalf("used %d: want 70 (40 + 20 + 10), groups 3 and 2 cached whole", c.used)
	}
	c.insert(4, 30) // 100 used: fits
	if c.lookup(4, 100) != 30 || c.used != 100 {
		t.Fatalf("used %d, want 100", c.used)
	}
	// Reading 3 touched 2 and 1 after it: group 4, read last, is newer,
	// then 1, 2, 3. A new group evicts 3 (the tail) first, not 1.
	c.lookup(4, 100)
	c.lookup(3, 100)
	c.insert(5, 10)
	if c.lookup(4, 100) == 0 && c.lookup(1, 100) == 0 {
		t.Fatal("evicted the prefix and the newest group")
	}
	if c.lookup(1, 100) != 40 {
		t.Fatalf("group 1, the prefix of 2 and 3, was evicted before its extensions (used %d)", c.used)
	}
	// An extension of a group not cached costs all its tokens.
	d := newPrefixCache(PrefixCache{Enabled: true, PrefixCache: eng.PrefixCache{BlockTokens: 10, CapacityTokens: 100}})
	d.insertAfter(7, 50, 6)
	if d.used != 50 {
		t.Fatalf("extension of an absent group: used %d, want 50", d.used)
	}
}

// Multi-turn conversations imported from Mooncake (each turn's prompt
// extends the turn before's full blocks) find the earlier turn's blocks
// cached: the share of prompt tokens served from the caches is close to
// an ideal block cache's. Before each turn left its own path cached, only
// the shared first block ever hit (under 5%).
func TestConversationTurnsHitTheCache(t *testing.T) {
	var b strings.Builder
	rng := rand.New(rand.NewPCG(5, 5))
	type row struct {
		at   int
		line string
	}
	var rows []row
	next := 1
	for c := 0; c < 60; c++ {
		at := rng.IntN(300000)
		in := 1000 + rng.IntN(2000)
		ids := []int{0}
		for len(ids) < (in+511)/512 {
			ids = append(ids, next)
			next++
		}
		for turn := 0; turn < 4; turn++ {
			js, _ := json.Marshal(ids)
			rows = append(rows, row{at, fmt.Sprintf(`{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": %s}`, at, in, 50+rng.IntN(200), js)})
			at += 20000 + rng.IntN(40000)
			full := in / 512
			in += 300 + rng.IntN(1200)
			ids = ids[:full]
			for len(ids) < (in+511)/512 {
				ids = append(ids, next)
				next++
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].at < rows[j].at })
	for _, r := range rows {
		b.WriteString(r.line + "\n")
	}
	path := filepath.Join(t.TempDir(), "conv.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Open(path, "")
	if err != nil {
		t.Fatal(err)
	}
	gen, err := tr.Generate(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for _, q := range gen {
		reqs = append(reqs, Request{At: q.At, InputTokens: q.InputTokens, OutputTokens: q.OutputTokens,
			PrefixGroup: q.PrefixGroup, PrefixTokens: q.PrefixTokens, CacheGroup: q.CacheGroup, CacheTokens: q.CacheTokens})
	}
	cfg := refConfig(2)
	cfg.Cache = DefaultPrefixCache
	_, out := runChecked(t, cfg, "static:1P1D", reqs)
	var cached, input int64
	for _, r := range out {
		cached += r.CachedTokens
		input += r.InputTokens
	}
	// An ideal block cache of unlimited size serves the shared full
	// blocks of every later turn: about 60% of these prompts' tokens.
	if share := float64(cached) / float64(input); share < 0.4 {
		t.Fatalf("%.3f of prompt tokens served from the cache: expected the later turns' shared blocks (ideal about 0.6)", share)
	}
}

// KV capacity at admission: a decode leg that does not fit waits until
// the running batch has room (growth past the capacity preempts:
// TestInvariantsUnderPreemption, engine's preempt_test.go).
func TestKVCapacityWaits(t *testing.T) {
	cfg := refConfig(2)
	cfg.Batch.KVCapacityTokens = 1500
	reqs := []Request{
		{At: 0, InputTokens: 1000, OutputTokens: 50},
		{At: 0, InputTokens: 1000, OutputTokens: 50},
	}
	_, rows := runChecked(t, cfg, "static:1P1D", reqs)
	a, b := rows[0], rows[1]
	if b.End < a.End || (a.TPOT() == b.TPOT()) {
		t.Fatalf("ends %v and %v, TPOT %v and %v: the second leg should wait for the first", a.End, b.End, a.TPOT(), b.TPOT())
	}
	// The second stream's first decode token comes only after the first
	// stream's last token.
	cfg.Batch.KVCapacityTokens = 0
	_, free := runChecked(t, cfg, "static:1P1D", reqs)
	if free[1].End >= b.End {
		t.Fatalf("without a bound the second request should finish sooner (%v vs %v)", free[1].End, b.End)
	}
}

// BenchmarkAdaptiveFleet runs the adaptive arm on fleets of 8 to 4,096
// reference instances, offered 0.75 requests/s per instance (100,000
// requests), and reports the wall (and CPU) cost per simulated request: placement
// and monitoring should cost O(log instances) per event, so the 4,096
// figure should stay within about 2x the 8 one.
func BenchmarkAdaptiveFleet(b *testing.B) { benchFleet(b, func(n int) string { return "adaptive" }) }

// BenchmarkStaticFleet is BenchmarkAdaptiveFleet for the even static split
// and aggregated serving, which place by the least-loaded index
// (core/argindex.go): O(1) per leg where the scan cost O(instances).
func BenchmarkStaticFleet(b *testing.B) {
	b.Run("static", func(b *testing.B) {
		benchFleet(b, func(n int) string { return fmt.Sprintf("static:%dP%dD", n/2, n-n/2) })
	})
	b.Run("aggregated", func(b *testing.B) { benchFleet(b, func(n int) string { return "aggregated" }) })
}

func benchFleet(b *testing.B, arm func(n int) string) {
	for _, n := range []int{8, 64, 512, 4096} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			reqs := randomTrace(7, 100000, 0.75*float64(n))
			cfg := refConfig(n)
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				s, err := New(cfg, mustController(b, arm(n), n), reqs, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(reqs)*b.N), "ns/request")
			if cpu > 0 {
				// CPU time (GC included) moves less than wall time with
				// other load on a shared machine.
				b.ReportMetric(float64(cpuTime()-cpu)/float64(len(reqs)*b.N), "cpu-ns/request")
			}
		})
	}
}

// A request whose prompt and answer need more KV than an engine holds is
// counted (it runs alone, which no vLLM would accept); the run still ends
// every request.
func TestOverKVCounted(t *testing.T) {
	cfg := refConfig(2)
	cfg.Batch.KVCapacityTokens = 1500
	reqs := []Request{
		{At: 0, InputTokens: 1000, OutputTokens: 50},
		{At: 0, InputTokens: 1480, OutputTokens: 50},                  // 1530 > 1500
		{At: 0, InputTokens: 1000, OutputTokens: 900, OutputCap: 400}, // capped: 1400 fits
	}
	st, rows := runChecked(t, cfg, "static:1P1D", reqs)
	if st.OverKV != 1 || len(rows) != 3 {
		t.Fatalf("OverKV %d over %d rows: expected 1 of 3", st.OverKV, len(rows))
	}
	cfg.Batch.KVCapacityTokens = 0
	if st, _ := runChecked(t, cfg, "static:1P1D", reqs); st.OverKV != 0 {
		t.Fatalf("OverKV %d without a bound: expected 0", st.OverKV)
	}
}
