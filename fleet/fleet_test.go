package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every bad fleet in testdata gives an error containing each line of its
// .want file: the field, the value and what was expected.
func TestBadFleets(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.bad.yaml")
	if len(files) < 5 {
		t.Fatalf("only %d bad fleets", len(files))
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		want, err := os.ReadFile(strings.TrimSuffix(f, ".bad.yaml") + ".want")
		if err != nil {
			t.Fatal(err)
		}
		_, perr := Parse(data, filepath.Base(f))
		if perr == nil {
			t.Errorf("%s: parsed without error", f)
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
			if !strings.Contains(perr.Error(), line) {
				t.Errorf("%s: error %q does not contain %q", f, perr, line)
			}
		}
	}
}

func TestBuiltins(t *testing.T) {
	for _, name := range Builtin() {
		s, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := 8
		if n, ok := map[string]int{"fleet512": 512, "fleet1024": 1024}[name]; ok {
			want = n
		}
		if s.Size() != want || s.CoreSLO().TTFT <= 0 {
			t.Errorf("%s: %d instances, slo %+v", name, s.Size(), s.CoreSLO())
		}
	}
	d, _ := Load("demo")
	if got := d.KVModel().Latency; got != 0.05 {
		t.Errorf("demo KV latency %v, want 0.05", got)
	}
	if _, err := Load("nope"); err == nil || !strings.Contains(err.Error(), "not a built-in fleet (demo, eval8, fleet1024, fleet512)") {
		t.Errorf("Load(nope) = %v", err)
	}
}

func TestListFleet(t *testing.T) {
	src := `name: two
instances:
  list:
    - {name: e0, url: "http://127.0.0.1:8101", profile: {a: 0, b: 1.0e-4, c: 0.001, slope: 1.0e-6, intercept: 0.01}}
    - {name: e1, url: "http://127.0.0.1:8102", profile: {a: 0, b: 2.0e-4, c: 0.001, slope: 1.0e-6, intercept: 0.01}}
slo: {ttft: 1s, tpot: 50ms}
`
	s, err := Parse([]byte(src), "two.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Profiles(); len(p) != 2 || p[1].B != 2e-4 {
		t.Fatalf("profiles %+v", p)
	}
}

// A batch or prefix_cache block that sets some fields leaves the others
// at their documented defaults (docs/fleet.md), as an absent block does.
func TestPartialBlocksKeepDefaults(t *testing.T) {
	src := `name: one
instances: {count: 2, profile: {a: 0, b: 1.0e-4, c: 0.001, slope: 1.0e-6, intercept: 0.01}}
slo: {ttft: 1s, tpot: 50ms}
batch: {max_seqs: 4}
prefix_cache: {capacity_tokens: 1000}
`
	s, err := Parse([]byte(src), "one.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b := *s.Batch; b.ChunkTokens != 2048 || b.BudgetTokens != 16384 || b.MaxSeqs != 4 || b.KVCapacityTokens != 0 {
		t.Errorf("batch %+v: expected chunk 2048, budget 16384, max_seqs 4, no KV bound", b)
	}
	if pc := *s.PrefixCache; pc.BlockTokens != 16 || pc.CapacityTokens != 1000 {
		t.Errorf("prefix_cache %+v: expected block 16, capacity 1000", pc)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range Builtin() {
		data, _ := builtin.ReadFile(name + ".yaml")
		f.Add(data)
	}
	files, _ := filepath.Glob("testdata/*.bad.yaml")
	for _, p := range files {
		data, _ := os.ReadFile(p)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "fuzz.yaml")
		if err == nil {
			if s.Size() < 1 || s.Validate() != nil {
				t.Fatalf("parsed an invalid fleet: %+v", s)
			}
			_ = s.Profiles()
			_ = s.KVModel()
		}
	})
}
