package engine

import (
	"errors"
	"fmt"
)

// Batch configures one engine's continuous batching. It is the one type
// for these settings: fleet files decode it (fleet.Batch), the simulator
// runs it (sim.Batch) and the stub engines run it (Config.Batch).
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
	// KVCapacityTokens bounds the KV an engine's decode streams hold, in
	// tokens (prompt plus answer so far, per stream, running or
	// recomputing); 0 means no bound. A decode leg that does not fit waits
	// (FCFS). When the streams' growth passes it, the newest admitted is
	// preempted as vLLM's recompute preemption does: freed, to the front
	// of the waiting queue, and once admitted again it computes its prompt
	// and answer so far again before decoding on. A stream alone runs
	// even past it.
	KVCapacityTokens int64 `yaml:"kv_capacity_tokens" json:"kv_capacity_tokens"`
}

// DefaultBatch is the reference's chunk and budget.
var DefaultBatch = Batch{ChunkTokens: DefaultChunkTokens, BudgetTokens: DefaultBudgetTokens}

// Validate reports every bad field, each named as a fleet file names it.
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

// PrefixCache sizes one engine's prefix cache.
type PrefixCache struct {
	// BlockTokens is the KV block size, tokens (default 16, vLLM's):
	// cached lengths are whole blocks.
	BlockTokens int `yaml:"block_tokens" json:"block_tokens"`
	// CapacityTokens is how many prompt tokens each engine keeps cached
	// (default 200,000).
	CapacityTokens int64 `yaml:"capacity_tokens" json:"capacity_tokens"`
}

// DefaultPrefixCache is the cache an engine gets when a run turns caching
// on without sizing it.
var DefaultPrefixCache = PrefixCache{BlockTokens: 16, CapacityTokens: 200_000}

// Validate reports every bad field.
func (p PrefixCache) Validate() error {
	var errs []error
	if p.BlockTokens < 1 {
		errs = append(errs, fmt.Errorf("block_tokens: %d: expected >= 1", p.BlockTokens))
	}
	if p.CapacityTokens < 1 {
		errs = append(errs, fmt.Errorf("capacity_tokens: %d: expected >= 1", p.CapacityTokens))
	}
	return errors.Join(errs...)
}
