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
