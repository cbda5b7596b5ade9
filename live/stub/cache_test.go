package stub

import (
	"fmt"
	"github.com/narwhal-bench/narwhal-bench/timing"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// words is n bytes of text that differs with seed.
func words(seed, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "w%d-%d ", seed, i)
	}
	return b.String()[:n]
}

// Block hashes are chained: a block matches only when every block before
// it does, as vLLM's block hashes chain on the parent's.
func TestBlockHashesChain(t *testing.T) {
	head := words(1, 128) // two 16-token blocks of 4-byte tokens
	a := &api.Request{Prompt: head + words(2, 72)}
	b := &api.Request{Prompt: head + words(3, 72)}
	c := &api.Request{Prompt: words(4, 64) + head[64:] + words(2, 72)}
	ha, hb, hc := api.BlockHashes(a, 50, 16), api.BlockHashes(b, 50, 16), api.BlockHashes(c, 50, 16)
	if len(ha) != 3 || ha[0] != hb[0] || ha[1] != hb[1] || ha[2] == hb[2] {
		t.Fatalf("a shared head: %x vs %x: expected three blocks, the first two equal", ha, hb)
	}
	if hc[1] == ha[1] {
		t.Fatal("a block after a different one matched: the hashes do not chain")
	}
	ids := &api.Request{PromptIDs: make([]int, 40)}
	if h := api.BlockHashes(ids, 40, 16); len(h) != 2 {
		t.Fatalf("token ids: %d blocks, want 2", len(h))
	}
}

// A hit is whole leading blocks and never the prompt's last token; the
// least recently used blocks leave first, a prompt's tail before its head.
func TestPrefixCacheMatchAndEvict(t *testing.T) {
	c := newPrefixCache(16, 4*16)
	p := &api.Request{Prompt: words(1, 4*64)}
	hp := api.BlockHashes(p, 64, 16)
	if got := c.match(hp, 64); got != 0 {
		t.Fatalf("empty cache hit %d", got)
	}
	c.insert(hp)
	if got := c.match(hp, 64); got != 48 {
		t.Fatalf("the same 64-token prompt again: %d cached, want 48 (its last token computes)", got)
	}
	if got := c.match(hp, 65); got != 64 {
		t.Fatalf("one token longer: %d cached, want 64", got)
	}
	// Two more blocks of another prompt evict p's two tail blocks; its
	// head still matches.
	q := &api.Request{Prompt: words(2, 2*64)}
	c.insert(api.BlockHashes(q, 32, 16))
	if got := c.match(hp, 65); got != 32 {
		t.Fatalf("after eviction: %d cached, want p's first two blocks (32)", got)
	}
}

// A stub with a prefix cache serves a shared prefix from it: the usage
// says how many prompt tokens (vLLM's prompt_tokens_details), and
// /metrics counts queries and hits in tokens, as vLLM's v1 counters.
func TestPrefixCacheServes(t *testing.T) {
	pc := engine.PrefixCache{BlockTokens: 16, CapacityTokens: 10_000}
	u := startFleet(t, 1, Options{PrefixCache: &pc}).Servers()[0].URL()
	head := words(1, 640) // 160 tokens, ten blocks
	cached := func(prompt string) int {
		t.Helper()
		r := post(t, u+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, prompt))
		resp := decodeResp(t, r.body)
		if resp.Usage == nil || resp.Usage.PromptTokensDetails == nil {
			t.Fatalf("no prompt_tokens_details: %s", r.body)
		}
		return resp.Usage.PromptTokensDetails.CachedTokens
	}
	a, b := head+words(2, 160), head+words(3, 160)
	if n := cached(a); n != 0 {
		t.Fatalf("first prompt: %d cached", n)
	}
	if n := cached(b); n != 160 {
		t.Fatalf("second prompt of the prefix: %d cached, want 160", n)
	}
	if n := cached(a); n != 192 {
		t.Fatalf("the first prompt again: %d cached, want 192 (its 200 tokens less the last, in whole blocks)", n)
	}
	page := scrape(t, u)
	for _, line := range []string{
		`vllm:prefix_cache_queries_total{engine="0",model_name="stub"} 600`,
		`vllm:prefix_cache_hits_total{engine="0",model_name="stub"} 352`,
	} {
		if !strings.Contains(page, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	// Without a cache: every prompt in full, no details, counters at 0.
	v := startFleet(t, 1, Options{}).Servers()[0].URL()
	post(t, v+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, a))
	r := post(t, v+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, a))
	if resp := decodeResp(t, r.body); resp.Usage == nil || resp.Usage.PromptTokensDetails != nil {
		t.Fatalf("no cache, usage %s", r.body)
	}
	if page := scrape(t, v); !strings.Contains(page, `vllm:prefix_cache_hits_total{engine="0",model_name="stub"} 0`+"\n") {
		t.Error("no cache, yet hits counted")
	}
}

// A prompt queued behind another of its prefix is looked up when its own
// first chunk is scheduled, not when it arrived: it finds what the first
// one cached (vLLM looks the cache up when it schedules a waiting request).
func TestPrefixCacheLookupAtSchedule(t *testing.T) {
	pc := engine.PrefixCache{BlockTokens: 16, CapacityTokens: 100_000}
	f, err := NewFleet(Options{TimeScale: scale(0.5), PrefixCache: &pc}, []Instance{{ID: "e0", Addr: "127.0.0.1:0",
		Engine: engine.Config{Profile: timing.Reference, Batch: engine.Batch{ChunkTokens: 512, BudgetTokens: 512}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	s := f.Servers()[0]
	head := words(1, 4096) // 1024 tokens
	got := make(chan int, 2)
	send := func(own int) {
		r := post(t, s.URL()+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, head+words(own, 4096)))
		got <- decodeResp(t, r.body).Usage.PromptTokensDetails.CachedTokens
	}
	go send(2)
	waitFor(t, "the first prompt to begin", func() bool { return s.Gauges().Started == 1 })
	go send(3)
	a, b := <-got, <-got
	if min(a, b) != 0 || max(a, b) != 1024 {
		t.Fatalf("cached %d and %d: want 0 for the first and 1024 for the one queued behind it", a, b)
	}
}
