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

// The index names a prompt's group by its first block and its prefix by
// the leading blocks an earlier prompt had; a prompt sharing nothing yet
// counts all its full blocks, so the core remembers where it went.
func TestPrefixIndex(t *testing.T) {
	x := newPrefixIndex(16)
	hashes := func(index int, group int64) []uint64 {
		text := loadgen.SharedPromptText(1, 0, index, 100, group, 60) // 60 shared tokens of 100
		return api.BlockHashes(&api.Request{Prompt: text}, 100, 16)
	}
	g1, n1 := x.place(hashes(1, 5))
	g2, n2 := x.place(hashes(2, 5))
	g3, n3 := x.place(hashes(3, 6))
	if g1 == 0 || g1 != g2 || g3 == g1 {
		t.Fatalf("groups %d, %d, %d: expected the first two equal and nonzero, the third another", g1, g2, g3)
	}
	if n1 != 96 || n2 != 48 || n3 != 96 {
		t.Fatalf("prefixes %d, %d, %d: want 96 (all six blocks: nothing shared yet), 48 (the three whole blocks of the 60 shared tokens), 96", n1, n2, n3)
	}
	if g, n := x.place(nil); g != 0 || n != 0 {
		t.Fatalf("a prompt under one block: group %d, prefix %d", g, n)
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
// is served from the cache its first filled.
func TestPrefixAwarePlacement(t *testing.T) {
	spec := testFleet(t, 8)
	pc := fleet.PrefixCache{BlockTokens: 16, CapacityTokens: 100_000}
	r := startRigSpec(t, spec, rigOpts{arm: "static:4P4D/alg1", stub: stub.Options{PrefixCache: &pc},
		configure: func(c *Config) { c.PrefixCache = &pc }})
	const input, shared = 400, 320 // tokens; 320 is 20 whole blocks
	send := func(index, group int) {
		text := loadgen.SharedPromptText(9, 0, index, input, int64(group), shared)
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
	if h := cacheHits(t, r); h != 0 {
		t.Fatalf("hits after the first wave: %d", h)
	}
	// The second one by one, on idle engines: each goes where its group
	// was prefilled (without the prefix, every idle engine costs the same).
	for g := 1; g <= 4; g++ {
		send(10+g, g)
	}
	if h := cacheHits(t, r); h != 4*shared {
		t.Fatalf("hits after the second wave: %d tokens, want %d (each of the four prompts on its group's engine)", h, 4*shared)
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
	first := map[string]event.Instance{}
	for _, row := range rows[:4] {
		first[row.Class] = row.PrefillInst
	}
	for _, row := range rows[4:] {
		if row.PrefillInst != first[row.Class] {
			t.Errorf("%s: second prompt prefilled on %d, its group's first on %d", row.Class, row.PrefillInst, first[row.Class])
		}
	}
}

// BenchmarkPrefixPlace is the router's per-request cost of prefix-aware
// placement: hashing an 8,000-token prompt's blocks and placing them in
// the index (one group's prompts, so the index stays warm).
func BenchmarkPrefixPlace(b *testing.B) {
	x := newPrefixIndex(16)
	reqs := make([]*api.Request, 64)
	for i := range reqs {
		reqs[i] = &api.Request{Prompt: loadgen.SharedPromptText(1, 0, i, 8000, 1+int64(i%8), 6000)}
	}
	b.SetBytes(8000 * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x.place(api.BlockHashes(reqs[i%len(reqs)], 8000, 16))
	}
}
