package sweep

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// wholeConfigHash is configHash as one json.Marshal of the whole object,
// the encoding every journaled run's config_hash has used.
func wholeConfigHash(cfg sim.Config, meta event.RunMeta) string {
	b, err := json.Marshal(struct {
		Profiles   []timing.Profile
		Pinned     []bool
		SLO        sloSeconds
		KV         timing.KV
		Batch      sim.Batch
		Cache      sim.PrefixCache
		DrainLimit event.Time
		Meta       event.RunMeta
		Admission  *core.Admission `json:",omitempty"`
	}{cfg.Profiles, cfg.Pinned, sloSeconds{cfg.SLO.TTFT.Seconds(), cfg.SLO.TPOT.Seconds()}, cfg.KV, cfg.Batch, cfg.Cache, cfg.DrainLimit, meta, admissionOrNil(cfg.Admission)})
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// The fleet is encoded once per sweep; the hash must stay the one whole
// encoding gives, with and without an admission gate and a prefix cache,
// or journals written before would no longer resume.
func TestConfigHasherMatchesWholeEncoding(t *testing.T) {
	for _, name := range []string{"demo", "eval8", "fleet512"} {
		fl, err := fleet.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		base := sim.Config{Profiles: fl.Profiles(), Pinned: fl.Pins(), SLO: fl.CoreSLO(), KV: fl.KVModel(), Batch: sim.DefaultBatch, DrainLimit: fl.Drain()}
		cached := base
		cached.Cache = sim.DefaultPrefixCache
		gated := base
		gated.Admission = core.Admission{Mode: core.AdmitQueue}
		for _, cfg := range []sim.Config{base, cached, gated} {
			h := newConfigHasher(cfg)
			for _, meta := range []event.RunMeta{
				{},
				{Schema: event.SchemaVersion, Version: "v<&>", Driver: "sim", Arm: "static:4P4D", Rate: 2.4, Seed: 7, Trace: "demo", TraceHash: "ab", Fleet: name, Instances: len(cfg.Profiles)},
				{Arm: "adaptive", Rate: 1e-9, Replay: "dir/x@1", Partial: true, Sent: 3},
			} {
				if got, want := h.hash(meta), wholeConfigHash(cfg, meta); got != want {
					t.Errorf("%s %+v: hash %s, whole encoding %s", name, meta, got, want)
				}
			}
		}
	}
}

// The dispatch order is a permutation of the runs, the most expensive
// guess first: a controller's run at the top rate before any static
// split's, and the lowest rate's runs last.
func TestDispatchOrder(t *testing.T) {
	arms := []string{"static:1P7D", "aggregated", "adaptive", "static:4P4D"}
	rates := []float64{0.5, 3, 1}
	order := dispatchOrder(arms, rates)
	seen := map[int]bool{}
	for _, k := range order {
		if k < 0 || k >= len(arms)*len(rates) || seen[k] {
			t.Fatalf("order %v: not a permutation of the %d runs", order, len(arms)*len(rates))
		}
		seen[k] = true
	}
	if len(seen) != len(arms)*len(rates) {
		t.Fatalf("order %v: %d runs, expected %d", order, len(seen), len(arms)*len(rates))
	}
	if first := order[0]; arms[first/len(rates)] != "adaptive" || rates[first%len(rates)] != 3 {
		t.Errorf("first run: %s at %v, expected adaptive at 3", arms[first/len(rates)], rates[first%len(rates)])
	}
	for _, k := range order[len(order)-3:] {
		if rates[k%len(rates)] != 0.5 {
			t.Errorf("order %v: a run at %v among the last three, expected the 0.5 req/s statics", order, rates[k%len(rates)])
		}
	}
}
