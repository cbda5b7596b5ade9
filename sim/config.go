package sim

import (
	"errors"
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// Batch configures one engine's continuous batching.
type Batch struct {
	// ChunkTokens is the most prompt tokens one prompt advances per
	// iteration (chunked prefill). Default 2048, as the Narwhal reference.
	ChunkTokens int `yaml:"chunk_tokens" json:"chunk_tokens"`
	// BudgetTokens is the tokens one iteration schedules: one per running
	// decode stream plus the prefill chunk tokens (vLLM's
	// max_num_batched_tokens). Default 16384, the reference's number; the
	// reference counted each stream's whole context against it instead.
	BudgetTokens int `yaml:"budget_tokens" json:"budget_tokens"`
	// MaxSeqs caps the running decode streams (vLLM's max_num_seqs); 0 means
	// no cap beyond BudgetTokens. Default 0.
	MaxSeqs int `yaml:"max_seqs" json:"max_seqs"`
	// KVCapacityTokens bounds the context tokens an engine's running decode
	// batch may hold; 0 means no bound. A decode leg that does not fit waits
	// (FCFS) until streams finish: nothing is preempted. The check is at
	// admission; streams may grow past it as they generate.
	KVCapacityTokens int64 `yaml:"kv_capacity_tokens" json:"kv_capacity_tokens"`
}

// DefaultBatch is the reference's chunk and budget.
var DefaultBatch = Batch{ChunkTokens: 2048, BudgetTokens: 16384}

// Validate reports every bad field.
func (b Batch) Validate() error {
	var errs []error
	if b.ChunkTokens < 1 {
		errs = append(errs, fmt.Errorf("chunk_tokens: %d: expected >= 1", b.ChunkTokens))
	}
	if b.BudgetTokens < 2 {
		errs = append(errs, fmt.Errorf("budget_tokens: %d: expected >= 2", b.BudgetTokens))
	}
	if b.MaxSeqs < 0 {
		errs = append(errs, fmt.Errorf("max_seqs: %d: expected >= 0 (0 = no cap)", b.MaxSeqs))
	}
	if b.KVCapacityTokens < 0 {
		errs = append(errs, fmt.Errorf("kv_capacity_tokens: %d: expected >= 0 (0 = no bound)", b.KVCapacityTokens))
	}
	return errors.Join(errs...)
}

// Config describes the simulated fleet.
type Config struct {
	// Profiles holds one timing profile per instance.
	Profiles []timing.Profile
	// Pinned marks instances no controller may move (nil: none).
	Pinned []bool
	// SLO is what the core prices placements against.
	SLO event.SLO
	// KV prices KV transfers between instances.
	KV timing.KV
	// Batch configures every engine's batching.
	Batch Batch
	// Cache configures every engine's prefix cache (off unless Enabled).
	Cache PrefixCache
	// Admission is the core's admission gate (default open: every arrival
	// is placed at once).
	Admission core.Admission
	// DrainLimit is how long after the last arrival the simulation keeps
	// running; requests still open then end as expired (drain_limit).
	// Default 600 s.
	DrainLimit event.Time
	// TokenHook, when set, is called for every output token with its
	// 1-based index and time, in time order per request. It costs an event
	// per token; tests use it to check causality.
	TokenHook func(req event.RequestID, k int, at event.Time)
}

// DefaultDrainLimit is how long a run drains after its last arrival.
const DefaultDrainLimit = 600 * event.Second

// Validate reports every bad field.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Profiles) == 0 {
		errs = append(errs, errors.New("instances: none: expected at least one"))
	}
	for i, p := range c.Profiles {
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("instances[%d].profile: %w", i, err))
		}
	}
	if err := core.ValidateSLO(c.SLO); err != nil {
		errs = append(errs, fmt.Errorf("slo: %w", err))
	}
	if err := c.KV.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("kv: %w", err))
	}
	if err := c.Batch.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("batch: %w", err))
	}
	if c.Cache.Enabled && (c.Cache.BlockTokens < 1 || c.Cache.CapacityTokens < 1) {
		errs = append(errs, fmt.Errorf("prefix_cache: block_tokens %d, capacity_tokens %d: expected both >= 1",
			c.Cache.BlockTokens, c.Cache.CapacityTokens))
	}
	if c.DrainLimit < 0 {
		errs = append(errs, fmt.Errorf("drain_limit: %v: expected >= 0", c.DrainLimit))
	}
	return errors.Join(errs...)
}

// Request is one offered request.
type Request struct {
	// At is the scheduled send time; the simulated client sends on time.
	At    event.Time
	Class string
	// InputTokens is the prompt length (>= 1).
	InputTokens int
	// OutputTokens is the natural answer length (>= 1).
	OutputTokens int
	// OutputCap stops the answer at this many tokens (0 = no cap); an answer
	// cut there finishes with reason "length".
	OutputCap int
	// PrefixGroup names the shared prefix the prompt starts with (0 =
	// none); its first PrefixTokens tokens are the same for the group.
	PrefixGroup  int64
	PrefixTokens int
}
