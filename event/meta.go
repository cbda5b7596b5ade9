package event

import (
	"encoding/json"
	"errors"
	"fmt"
)

// SchemaVersion is the version of the record model a journal was written
// with. Readers refuse journals from a newer schema.
const SchemaVersion = 1

// RunMeta describes one run; it is the Text of the run's KindRunMeta record,
// as JSON. Everything here is a pure function of the experiment, so a
// simulated run's metadata is byte-identical across repeats (StartUnixNano
// is 0 in simulations; live runs set it).
type RunMeta struct {
	Schema     int     `json:"schema"`
	Version    string  `json:"version"`     // narwhal-bench version
	Driver     string  `json:"driver"`      // "sim" or "live"
	Arm        string  `json:"arm"`         // controller arm, e.g. "static:3P5D"
	Rate       float64 `json:"rate"`        // mean arrival rate used, req/s
	Seed       uint64  `json:"seed"`        // trace seed
	Trace      string  `json:"trace"`       // trace name
	TraceHash  string  `json:"trace_hash"`  // sha256 of the trace file's bytes
	Fleet      string  `json:"fleet"`       // fleet name
	ConfigHash string  `json:"config_hash"` // sha256 of the resolved configuration
	Instances  int     `json:"instances"`
	GPUs       int     `json:"gpus,omitempty"` // GPUs in the fleet, when known
	TTFTSLO    float64 `json:"ttft_slo_s"`
	TPOTSLO    float64 `json:"tpot_slo_s"`
	// StartUnixNano is the wall-clock start of a live run; 0 in simulations.
	StartUnixNano int64 `json:"start_unix_nano,omitempty"`
	// Live load generator (narwhal-bench live) and replays; zero otherwise.
	// Target is the endpoint a --target run drove; Replay, the journal a
	// sim --replay run re-drove. Partial: the run stopped before its whole
	// trace was sent (Ctrl-C); Planned and Sent count the trace's requests
	// and those sent. LagP50/P90/P99 are the schedule lag (actual minus
	// scheduled send, seconds); Degraded: LagP99 over 0.5 s.
	Target   string  `json:"target,omitempty"`
	Replay   string  `json:"replay,omitempty"`
	Partial  bool    `json:"partial,omitempty"`
	Planned  int     `json:"planned,omitempty"`
	Sent     int     `json:"sent,omitempty"`
	LagP50   float64 `json:"lag_p50_s,omitempty"`
	LagP90   float64 `json:"lag_p90_s,omitempty"`
	LagP99   float64 `json:"lag_p99_s,omitempty"`
	Degraded bool    `json:"degraded,omitempty"`
	// PrefixCache: the engines kept prefix caches: a simulation with
	// --prefix-cache, or a live run whose router priced them (live or
	// serve --prefix-cache; stubs it started kept them). A live
	// journal's arrivals then carry the prefix groups the router priced
	// (Record.PrefixGroup), and sim --replay of it keeps prefix caches.
	PrefixCache bool `json:"prefix_cache,omitempty"`
	// Cordons are the maintenance windows a simulation played (sim
	// --cordon, canonical: "e3@60s+120s,..."); "" for none.
	Cordons string `json:"cordons,omitempty"`
}

// Encode returns m as JSON.
func (m RunMeta) Encode() string {
	b, _ := json.Marshal(m)
	return string(b)
}

// ErrNewerSchema is wrapped by DecodeRunMeta's error for a journal written
// by a newer narwhal-bench: whole, but unreadable here (not damage).
var ErrNewerSchema = errors.New("upgrade narwhal-bench to read it")

// DecodeRunMeta reads a KindRunMeta record's Text. It refuses a newer schema
// (ErrNewerSchema).
func DecodeRunMeta(text string) (RunMeta, error) {
	var m RunMeta
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return m, fmt.Errorf("run metadata: %w", err)
	}
	if m.Schema > SchemaVersion {
		return m, fmt.Errorf("run metadata: schema %d: this narwhal-bench reads schema %d or older: %w", m.Schema, SchemaVersion, ErrNewerSchema)
	}
	if m.Schema < 1 {
		return m, fmt.Errorf("run metadata: schema %d: expected >= 1", m.Schema)
	}
	return m, nil
}
