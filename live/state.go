package live

import (
	"github.com/narwhal-bench/narwhal-bench/event"
)

// State is GET /state: the split, each engine's load and health, moves and
// the router's counts, as the owner sees them at one instant.
type State struct {
	// Arm is the controller's name.
	Arm string `json:"arm"`
	// NowSeconds is the router clock (seconds since start).
	NowSeconds float64 `json:"now_s"`
	// Split counts engines per role ("prefill", "decode", "mixed", "none").
	Split map[string]int `json:"split"`
	// Moves counts role moves since start (opening roles excluded).
	Moves   int           `json:"moves"`
	Counts  Counts        `json:"counts"`
	Engines []EngineState `json:"engines"`
}

// EngineState is one engine in GET /state.
type EngineState struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	Role string `json:"role"`
	// Online is false while the engine is down or still starting a role.
	Online     bool   `json:"online"`
	Down       bool   `json:"down"`
	Generation uint64 `json:"generation"`
	// PrefillLegs and DecodeLegs are the legs resident there; their tokens
	// are the core's estimates of resident prompt and context tokens.
	PrefillLegs   int   `json:"prefill_legs"`
	PrefillTokens int64 `json:"prefill_tokens"`
	DecodeLegs    int   `json:"decode_legs"`
	DecodeTokens  int64 `json:"decode_tokens"`
	// MeanIntervalSeconds is the monitor's last mean decode gap.
	MeanIntervalSeconds float64 `json:"mean_interval_s"`
	// LastMoveSeconds is when its role last changed (router clock); absent
	// when it never moved.
	LastMoveSeconds *float64 `json:"last_move_s,omitempty"`
}

func (o *owner) snapshot(now event.Time) State {
	v := o.core.View()
	s := State{Arm: o.core.Controller().Name(), NowSeconds: now.Seconds(), Split: map[string]int{}, Moves: o.moves, Counts: o.counts}
	for i, e := range o.r.engines {
		in := v.Instance(event.Instance(i))
		s.Split[in.Role.String()]++
		es := EngineState{Name: e.name, URL: e.base, Role: in.Role.String(), Online: in.Online(now), Down: in.Down,
			Generation: in.Generation, PrefillLegs: in.PrefillCount, PrefillTokens: in.PrefillTokens,
			DecodeLegs: in.DecodeCount, DecodeTokens: in.DecodeTokens, MeanIntervalSeconds: in.MeanInterval}
		if in.Moved {
			t := in.LastMove.Seconds()
			es.LastMoveSeconds = &t
		}
		s.Engines = append(s.Engines, es)
	}
	return s
}
