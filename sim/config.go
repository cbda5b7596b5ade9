package sim

import (
	"errors"
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/core"
	eng "github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// Batch configures one engine's continuous batching: eng.Batch (package engine), the
// one type fleet files, the simulator and the stub engines share.
type Batch = eng.Batch

// DefaultBatch is the reference's chunk and budget.
var DefaultBatch = eng.DefaultBatch

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
	// ObserveEvery is how stale the core's view of the engines (each
	// engine's resident decode context and decode pace, core.Observation)
	// may be when it places a request: before an arrival or a finished
	// prefill is fed to the core, every engine is observed when the last
	// observation is at least this old. The controller's ticks observe
	// too. 0 is DefaultObserveEvery; a negative value observes at the
	// controller's ticks only, as the simulator did before (a controller
	// that never ticks, a static split, then placed on a view that
	// drifted further from the engines with every request).
	ObserveEvery event.Time
	// Cordons are maintenance windows: from From to Until the instance is
	// cordoned (core.Cordon: no new placement there, the work resident
	// there runs to its end), then uncordoned. A cordon the core refuses
	// (the last engine up, or the last online engine of a role none could
	// take over) is journaled as a decision and skipped with its window.
	Cordons []Cordon
	// TokenHook, when set, is called for every output token with its
	// 1-based index and time, in time order per request. It costs an event
	// per token; tests use it to check causality.
	TokenHook func(req event.RequestID, k int, at event.Time)
}

// DefaultObserveEvery is the default Config.ObserveEvery, the core's.
const DefaultObserveEvery = core.DefaultObserveEvery

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
	if c.Cache.Enabled {
		if err := c.Cache.PrefixCache.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("prefix_cache: %w", err))
		}
	}
	if c.DrainLimit < 0 {
		errs = append(errs, fmt.Errorf("drain_limit: %v: expected >= 0", c.DrainLimit))
	}
	for i, w := range c.Cordons {
		switch {
		case w.Inst < 0 || int(w.Inst) >= len(c.Profiles):
			errs = append(errs, fmt.Errorf("cordons[%d]: instance %d: expected 0 to %d", i, w.Inst, len(c.Profiles)-1))
		case w.From < 0 || w.Until <= w.From:
			errs = append(errs, fmt.Errorf("cordons[%d]: from %v until %v: expected 0 <= from < until", i, w.From, w.Until))
		}
		for j, o := range c.Cordons[:i] {
			if o.Inst == w.Inst && w.From < o.Until && o.From < w.Until {
				errs = append(errs, fmt.Errorf("cordons[%d]: instance %d from %v until %v overlaps cordons[%d]: expected one window at a time per instance", i, w.Inst, w.From, w.Until, j))
			}
		}
	}
	return errors.Join(errs...)
}

// Cordon is one maintenance window (Config.Cordons).
type Cordon struct {
	Inst        event.Instance
	From, Until event.Time
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
	// CacheGroup and CacheTokens, when CacheGroup is not 0, are the group
	// and length the prompt leaves in its engine's prefix cache besides its
	// prefix group (traces.Request).
	CacheGroup  int64
	CacheTokens int
}
