package live

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/live/loadgen"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// The index finds where a prompt's longest shared prefix was prefilled
// and how long it is, block by block: prompts that share an opening (a
// system prompt) and part ways later are credited only where each one's
// own prefix is.
func TestPrefixIndex(t *testing.T) {
	x := newPrefixIndex(16)
	system := strings.Repeat("You are a careful assistant. ", 3)[:64] // one block, every prompt's
	hashes := func(index int, doc int64) []uint64 {
		text := system + loadgen.SharedPromptText(1, 0, index, 99, doc, 59) // 59 tokens of doc, then 40 own
		return api.BlockHashes(&api.Request{Prompt: text}, 115, 16)
	}
	on, cached, g1, p1 := x.lookup(hashes(1, 5))
	if on != event.NoInstance || cached != 0 || g1 == 0 || p1 != 112 {
		t.Fatalf("first prompt: on %d, cached %d, group %d, prefix %d: want nowhere, 0, a group, all 7 blocks", on, cached, g1, p1)
	}
	x.placed(hashes(1, 5), 2)
	x.placed(hashes(2, 6), 5)
	// Doc 5 again: its system block and three whole blocks of the doc
	// (16 + 59 = 75 tokens shared: 4 blocks), on engine 2.
	if on, cached, g, p := x.lookup(hashes(3, 5)); on != 2 || cached != 64 || g != g1 || p != 64 {
		t.Fatalf("doc 5 again: on %d, cached %d, group %d, prefix %d: want engine 2, 64 tokens, group %d, 64", on, cached, g, p, g1)
	}
	if on, cached, _, _ := x.lookup(hashes(4, 6)); on != 5 || cached != 64 {
		t.Fatalf("doc 6 again: on %d, cached %d: want engine 5, 64 tokens", on, cached)
	}
	// A new document shares only the system prompt, last prefilled on 5.
	if on, cached, _, _ := x.lookup(hashes(5, 7)); on != 5 || cached != 16 {
		t.Fatalf("a new doc: on %d, cached %d: want engine 5, the system prompt's 16 tokens", on, cached)
	}
	if on, cached, g, p := x.lookup(nil); on != event.NoInstance || cached != 0 || g != 0 || p != 0 {
		t.Fatal("a prompt under one block has a prefix")
	}
}

// cacheHits sums the stubs' vllm:prefix_cache_hits_total.
func cacheHits(t *testing.T, r *rig) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$`)
	total := 0
	for _, s := range r.stubs.Servers() {
		resp, err := http.Get(s.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := re.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no vllm:prefix_cache_hits_total", s.URL())
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		total += int(v)
	}
	return total
}

// With Config.PrefixCache the router prices the engines' prefix caches
// (Arrow §5.3's prefill cost with the reference's cooperative reuse): a
// prompt goes to the prefill engine that holds its group's prefix when the
// engines are otherwise alike, so a second prompt of each of four groups
// is served from the cache its first filled, though every prompt opens
// with the same system line.
func TestPrefixAwarePlacement(t *testing.T) {
	spec := testFleet(t, 8)
	pc := fleet.PrefixCache{BlockTokens: 16, CapacityTokens: 100_000}
	r := startRigSpec(t, spec, rigOpts{arm: "static:4P4D/alg1", stub: stub.Options{PrefixCache: &pc},
		configure: func(c *Config) { c.PrefixCache = &pc }})
	// Every prompt opens with the same system line (one block), then its
	// group's document: the groups part ways after the first block.
	const input, shared = 400, 320 // tokens; 320 is 20 whole blocks, the system line's included
	system := strings.Repeat("Answer from the document. ", 3)[:64]
	send := func(index, group int) {
		text := system + loadgen.SharedPromptText(9, 0, index, input-16, int64(group), shared-16)
		q, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions",
			strings.NewReader(fmt.Sprintf(`{"model":"stub","prompt":%q,"max_tokens":3}`, text)))
		q.Header.Set(HeaderClass, "g"+strconv.Itoa(group))
		resp, err := http.DefaultClient.Do(q)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d", resp.StatusCode)
		}
	}
	// The first wave at once: the four prompts spread over the prefill
	// engines as their queues say.
	var wg sync.WaitGroup
	for g := 1; g <= 4; g++ {
		wg.Add(1)
		go func() { defer wg.Done(); send(g, g) }()
	}
	wg.Wait()
	first := cacheHits(t, r)
	if first%16 != 0 || first > 3*16 {
		t.Fatalf("hits after the first wave: %d: want the system line's at most (16 tokens a prompt)", first)
	}
	// The second one by one, on idle engines: each goes where its group
	// was prefilled (without the prefix, every idle engine costs the same).
	for g := 1; g <= 4; g++ {
		send(10+g, g)
	}
	if h := cacheHits(t, r) - first; h != 4*shared {
		t.Fatalf("hits in the second wave: %d tokens, want %d (each of the four prompts on its group's engine)", h, 4*shared)
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	for _, row := range rows {
		if row.Terminal != event.KindFinish {
			t.Fatalf("outcomes %v: expected 8 answers", outcomes(rows))
		}
	}
	if len(rows) != 8 {
		t.Fatalf("%d requests journaled, want 8", len(rows))
	}
	firstOn := map[string]event.Instance{}
	for _, row := range rows[:4] {
		firstOn[row.Class] = row.PrefillInst
	}
	for _, row := range rows[4:] {
		if row.PrefillInst != firstOn[row.Class] {
			t.Errorf("%s: second prompt prefilled on %d, its group's first on %d", row.Class, row.PrefillInst, firstOn[row.Class])
		}
		// The journal holds what the prefill engine said it served from
		// its cache (the prefill leg's usage.prompt_tokens_details).
		if row.CachedTokens != shared {
			t.Errorf("%s: second prompt journaled %d cached tokens, want %d", row.Class, row.CachedTokens, shared)
		}
	}
}

// BenchmarkPrefixPlace is the router's per-request cost of prefix-aware
// placement: hashing an 8,000-token prompt's blocks, looking them up in
// the index and recording where they went (eight groups, so the index
// stays warm).
func BenchmarkPrefixPlace(b *testing.B) {
	x := newPrefixIndex(16)
	reqs := make([]*api.Request, 64)
	for i := range reqs {
		reqs[i] = &api.Request{Prompt: loadgen.SharedPromptText(1, 0, i, 8000, 1+int64(i%8), 6000)}
	}
	b.SetBytes(8000 * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h := api.BlockHashes(reqs[i%len(reqs)], 8000, 16)
		x.lookup(h)
		x.placed(h, event.Instance(i%4))
	}
}

// An answer one engine serves whole (aggregated serving) journals its
// cached prompt tokens too, as a prefill leg's are: a non-streamed one
// from its usage, a streamed one from its last chunk's usage, which the
// router asks for when the client did not (and does not pass on).
func TestAggregatedCachedTokensJournaled(t *testing.T) {
	spec := testFleet(t, 1)
	pc := fleet.PrefixCache{BlockTokens: 16, CapacityTokens: 100_000}
	r := startRigSpec(t, spec, rigOpts{arm: "aggregated", stub: stub.Options{PrefixCache: &pc},
		configure: func(c *Config) { c.PrefixCache = &pc }})
	text := loadgen.SharedPromptText(9, 0, 1, 400, 7, 400)
	for _, extra := range []string{`"stream":false`, `"stream":false`, `"stream":true`,
		`"stream":true,"stream_options":{"include_usage":true}`} {
		resp := post(t, r, "/v1/completions", fmt.Sprintf(`{"model":"stub","prompt":%q,"max_tokens":3,%s}`, text, extra), nil)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		want := !strings.Contains(extra, `"stream":true`) || strings.Contains(extra, "include_usage")
		if got := strings.Contains(string(b), `"usage":{`); got != want {
			t.Errorf("%s: usage in the answer %v, expected %v:\n%s", extra, got, want, b)
		}
	}
	hits := cacheHits(t, r)
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if len(rows) != 4 || rows[0].CachedTokens != 0 {
		t.Fatalf("rows %+v: expected 4, the first with no cached tokens journaled", rows)
	}
	got := rows[1].CachedTokens
	if got == 0 || 3*got != int64(hits) {
		t.Fatalf("the second prompt journaled %d cached tokens; the engine served %d from its cache over the last three", got, hits)
	}
	for i, row := range rows[2:] {
		if row.CachedTokens != got {
			t.Errorf("streamed request %d journaled %d cached tokens, the non-streamed one %d", i+1, row.CachedTokens, got)
		}
	}
}
