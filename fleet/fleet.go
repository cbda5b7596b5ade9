package fleet

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"github.com/narwhal-bench/narwhal-bench/internal/strictyaml"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

//go:embed *.yaml
var builtin embed.FS

// Spec is a fleet file.
type Spec struct {
	// Name identifies the fleet in reports.
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Instances lists the engines, or gives a count of identical ones.
	Instances Instances `yaml:"instances"`
	// SLO is the objective pair: ttft and tpot durations.
	SLO SLO `yaml:"slo"`
	// KV prices KV transfers (default: the reference's flat 50 ms).
	KV *KV `yaml:"kv"`
	// Batch configures continuous batching (defaults 2048 / 16384 / 0).
	Batch *Batch `yaml:"batch"`
	// DrainLimit is how long a simulation drains after its last arrival
	// (default 600s).
	DrainLimit string `yaml:"drain_limit,text"`
	// PrefixCache sizes each engine's prefix cache when a run turns it on
	// (defaults: 16-token blocks, 200,000 tokens).
	PrefixCache *PrefixCache `yaml:"prefix_cache"`
	// GPUsPerInstance is how many GPUs each engine uses (0 = unknown); it
	// lets reports give goodput per GPU.
	GPUsPerInstance int `yaml:"gpus_per_instance"`
	// Admission is the router's admission gate, the same in sim and serve
	// (default: open).
	Admission *Admission `yaml:"admission"`
}

// Admission is the YAML form of core.Admission.
type Admission struct {
	// Mode is open (place every arrival at once) or queue (price its TTFT,
	// queue it until it fits or its deadline passes).
	Mode string `yaml:"mode"`
	// Margin is the budget's hysteresis: TTFT SLO × (1 + margin).
	Margin float64 `yaml:"margin"`
	// Deadline is the longest wait in the queue (default: the TTFT SLO).
	Deadline string `yaml:"deadline,text"`
	// Depth bounds the queue (0 = no bound).
	Depth int `yaml:"depth"`
}

// PrefixCache is the prefix-cache sizing: engine.PrefixCache, the one type
// the simulator and the stub engines share.
type PrefixCache = engine.PrefixCache

// Instances is either {count, profile} or a list of named instances.
type Instances struct {
	Count   int            `yaml:"count"`
	Profile timing.Profile `yaml:"profile"`
	List    []Instance     `yaml:"list"`
}

// Instance is one named engine.
type Instance struct {
	Name    string         `yaml:"name"`
	Profile timing.Profile `yaml:"profile"`
	// URL is the engine's base URL (live runs only).
	URL string `yaml:"url"`
	// Pinned engines keep their opening role: no controller moves them.
	Pinned bool `yaml:"pinned"`
}

// SLO is the objective pair as durations ("2.1s", "45ms").
type SLO struct {
	TTFT string `yaml:"ttft,text"`
	TPOT string `yaml:"tpot,text"`
}

// KV is the YAML form of timing.KV.
type KV struct {
	// Latency is a duration ("50ms").
	Latency       string  `yaml:"latency,text"`
	BytesPerToken float64 `yaml:"bytes_per_token"`
	// Bandwidth is bytes per second.
	Bandwidth float64 `yaml:"bandwidth"`
}

// Batch is the batching settings: engine.Batch, the one type (and one
// validation) the simulator and the stub engines share.
type Batch = engine.Batch

// Builtin returns the names of the built-in fleets.
func Builtin() []string {
	ents, _ := builtin.ReadDir(".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// Load reads a built-in fleet by name or a fleet file by path.
//
// A built-in fleet is also found by its file name (eval8.yaml,
// fleet/eval8.yaml) when no such file exists where the command runs.
func Load(nameOrPath string) (*Spec, error) {
	if data, err := builtin.ReadFile(nameOrPath + ".yaml"); err == nil && !strings.ContainsAny(nameOrPath, "/\\") {
		return Parse(data, nameOrPath)
	}
	if _, err := os.Stat(nameOrPath); err != nil {
		base := filepath.Base(nameOrPath)
		for _, ext := range []string{".yaml", ".yml"} {
			if name, ok := strings.CutSuffix(base, ext); ok {
				if data, err := builtin.ReadFile(name + ".yaml"); err == nil {
					return Parse(data, name)
				}
			}
		}
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("fleet %q: not a built-in fleet (%s) and not a readable file: %w",
			nameOrPath, strings.Join(Builtin(), ", "), err)
	}
	return Parse(data, path.Base(nameOrPath))
}

// Parse decodes a fleet file strictly (unknown fields are errors) and
// validates it. source names the file in errors.
func Parse(data []byte, source string) (spec *Spec, err error) {
	defer func() {
		if r := recover(); r != nil { // the YAML library must never crash a user
			spec, err = nil, fmt.Errorf("fleet %s: unreadable YAML: %v", source, r)
		}
	}()
	var s Spec
	if errs := strictyaml.Decode(data, &s); len(errs) > 0 {
		return nil, fmt.Errorf("fleet %s: %w", source, errors.Join(errs...))
	}
	if bytes.TrimSpace(data) == nil {
		return nil, fmt.Errorf("fleet %s: empty file: expected a fleet spec", source)
	}
	s.fillDefaults()
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("fleet %s: %w", source, err)
	}
	return &s, nil
}

// fillDefaults gives the fields a file leaves out of a batch or
// prefix_cache block their documented defaults (docs/fleet.md), as when
// the block is absent: `batch: {max_seqs: 4}` keeps the default chunk and
// budget.
func (s *Spec) fillDefaults() {
	if b := s.Batch; b != nil {
		if b.ChunkTokens == 0 {
			b.ChunkTokens = engine.DefaultBatch.ChunkTokens
		}
		if b.BudgetTokens == 0 {
			b.BudgetTokens = engine.DefaultBatch.BudgetTokens
		}
	}
	if pc := s.PrefixCache; pc != nil {
		if pc.BlockTokens == 0 {
			pc.BlockTokens = engine.DefaultPrefixCache.BlockTokens
		}
		if pc.CapacityTokens == 0 {
			pc.CapacityTokens = engine.DefaultPrefixCache.CapacityTokens
		}
	}
}

// Validate reports every violation, each naming its field and value.
func (s *Spec) Validate() error {
	var errs []error
	in := s.Instances
	switch {
	case in.Count > 0 && len(in.List) > 0:
		errs = append(errs, fmt.Errorf("instances: both count %d and a list of %d: expected one of them", in.Count, len(in.List)))
	case in.Count < 0:
		errs = append(errs, fmt.Errorf("instances.count: %d: expected >= 1", in.Count))
	case in.Count == 0 && len(in.List) == 0:
		errs = append(errs, errors.New("instances: none: expected count >= 1 with a profile, or a list"))
	case in.Count > 100000:
		errs = append(errs, fmt.Errorf("instances.count: %d: expected at most 100000", in.Count))
	}
	if in.Count > 0 {
		if err := in.Profile.Validate(); err != nil {
			errs = append(errs, prefix("instances.profile", err))
		}
	}
	names := map[string]int{}
	for i, x := range in.List {
		if err := x.Profile.Validate(); err != nil {
			errs = append(errs, prefix(fmt.Sprintf("instances.list[%d].profile", i), err))
		}
		if x.Name != "" {
			if j, dup := names[x.Name]; dup {
				errs = append(errs, fmt.Errorf("instances.list[%d].name: %q also names list[%d]: expected unique names", i, x.Name, j))
			}
			names[x.Name] = i
		}
	}
	ttft, err1 := duration("slo.ttft", s.SLO.TTFT, true)
	tpot, err2 := duration("slo.tpot", s.SLO.TPOT, true)
	errs = append(errs, err1, err2)
	if err1 == nil && err2 == nil {
		if err := core.ValidateSLO(event.SLO{TTFT: event.Seconds(ttft), TPOT: event.Seconds(tpot)}); err != nil {
			errs = append(errs, prefix("slo", err))
		}
	}
	if s.KV != nil {
		_, err := duration("kv.latency", s.KV.Latency, false)
		errs = append(errs, err)
		if err == nil {
			if err := s.KVModel().Validate(); err != nil {
				errs = append(errs, prefix("kv", err))
			}
		}
	}
	if b := s.Batch; b != nil {
		if err := b.Validate(); err != nil {
			errs = append(errs, prefix("batch", err))
		}
	}
	if pc := s.PrefixCache; pc != nil {
		if err := pc.Validate(); err != nil {
			errs = append(errs, prefix("prefix_cache", err))
		}
	}
	if a := s.Admission; a != nil {
		if _, err := core.ParseAdmissionMode(a.Mode); err != nil {
			errs = append(errs, fmt.Errorf("admission.mode: %q: expected open or queue", a.Mode))
		}
		if !(a.Margin >= 0) || math.IsInf(a.Margin, 0) {
			errs = append(errs, fmt.Errorf("admission.margin: %v: expected a number >= 0", a.Margin))
		}
		if d, err := duration("admission.deadline", a.Deadline, false); err != nil {
			errs = append(errs, err)
		} else if d < 0 {
			errs = append(errs, fmt.Errorf("admission.deadline: %q: expected a positive duration", a.Deadline))
		}
		if a.Depth < 0 {
			errs = append(errs, fmt.Errorf("admission.depth: %d: expected >= 0 (0 = no bound)", a.Depth))
		}
	}
	if s.GPUsPerInstance < 0 {
		errs = append(errs, fmt.Errorf("gpus_per_instance: %d: expected >= 0 (0 = unknown)", s.GPUsPerInstance))
	}
	if s.DrainLimit != "" {
		if d, err := duration("drain_limit", s.DrainLimit, true); err != nil {
			errs = append(errs, err)
		} else if d <= 0 {
			errs = append(errs, fmt.Errorf("drain_limit: %s: expected a positive duration", s.DrainLimit))
		}
	}
	return errors.Join(errs...)
}

// duration reads a Go duration string with a unit, in seconds. A bare
// number is refused, as in trace files, so seconds and milliseconds are
// never confused.
func duration(field, v string, required bool) (float64, error) {
	if v == "" {
		if required {
			return 0, fmt.Errorf("%s: missing: expected a duration such as 2.1s or 45ms", field)
		}
		return 0, nil
	}
	d, err := event.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return d.Seconds(), nil
}

// Drain returns the drain limit (0 when the file sets none).
func (s *Spec) Drain() event.Time {
	d, _ := duration("drain_limit", s.DrainLimit, false)
	return event.Seconds(d)
}

func prefix(field string, err error) error {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		lines = append(lines, field+"."+l)
	}
	return errors.New(strings.Join(lines, "\n"))
}

func (s SLO) core() event.SLO {
	ttft, _ := event.ParseDuration(s.TTFT)
	tpot, _ := event.ParseDuration(s.TPOT)
	return event.SLO{TTFT: ttft, TPOT: tpot}
}

// CoreSLO returns the objectives the core prices placements against.
func (s *Spec) CoreSLO() event.SLO { return s.SLO.core() }

// Profiles returns one profile per instance.
func (s *Spec) Profiles() []timing.Profile {
	if s.Instances.Count > 0 {
		out := make([]timing.Profile, s.Instances.Count)
		for i := range out {
			out[i] = s.Instances.Profile
		}
		return out
	}
	out := make([]timing.Profile, len(s.Instances.List))
	for i, x := range s.Instances.List {
		out[i] = x.Profile
	}
	return out
}

// Pins returns which instances are pinned, or nil when none is.
func (s *Spec) Pins() []bool {
	var out []bool
	for i, x := range s.Instances.List {
		if x.Pinned {
			if out == nil {
				out = make([]bool, len(s.Instances.List))
			}
			out[i] = true
		}
	}
	return out
}

// Size is the number of instances.
func (s *Spec) Size() int { return len(s.Profiles()) }

// KVModel returns the KV transfer model (the reference's flat 50 ms when
// the file gives none).
func (s *Spec) KVModel() timing.KV {
	if s.KV == nil {
		return timing.FlatKV
	}
	lat, _ := duration("latency", s.KV.Latency, false)
	return timing.KV{Latency: lat, BytesPerToken: s.KV.BytesPerToken, Bandwidth: s.KV.Bandwidth}
}

// PrefixCacheSize is each engine's prefix cache when a run turns caching
// on: the file's prefix_cache, else engine.DefaultPrefixCache.
func (s *Spec) PrefixCacheSize() PrefixCache {
	if s.PrefixCache == nil {
		return engine.DefaultPrefixCache
	}
	return *s.PrefixCache
}

// Names returns each instance's name: its list name, else e<i>.
func (s *Spec) Names() []string {
	out := make([]string, s.Size())
	for i := range out {
		out[i] = "e" + strconv.Itoa(i)
		if i < len(s.Instances.List) && s.Instances.List[i].Name != "" {
			out[i] = s.Instances.List[i].Name
		}
	}
	return out
}

// URLs returns each instance's base URL for live runs ("" where the fleet
// file gives none).
func (s *Spec) URLs() []string {
	out := make([]string, s.Size())
	for i := range out {
		if i < len(s.Instances.List) {
			out[i] = s.Instances.List[i].URL
		}
	}
	return out
}

// CoreAdmission returns the admission gate (open when the file sets none).
func (s *Spec) CoreAdmission() core.Admission {
	a := s.Admission
	if a == nil {
		return core.Admission{}
	}
	mode, _ := core.ParseAdmissionMode(a.Mode)
	deadline, _ := event.ParseDuration(a.Deadline)
	if a.Deadline == "" {
		deadline = 0
	}
	return core.Admission{Mode: mode, Margin: a.Margin, Deadline: deadline, Depth: a.Depth}
}
