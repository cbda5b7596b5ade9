package live

import (
	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// State is GET /state: the split, each engine's load and health, moves and
// the router's counts, as the owner sees them at one instant.
type State struct {
	// Arm is the controller's name.
	Arm string `json:"arm"`
	// NowSeconds is the router clock (seconds since start).
	NowSeconds float64 `json:"now_s"`
	// Split counts engines per role ("prefill", "decode", "mixed", "none"),
	// down ones included (a role is a label); SplitOnline counts those of
	// each role that take placements now (up, not starting a role).
	Split       map[string]int `json:"split"`
	SplitOnline map[string]int `json:"split_online"`
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
	Online bool `json:"online"`
	// Down: the router ejected it (its breaker is open). Cordoned: an
	// operator took it out of service (POST /engines/NAME/cordon); it
	// takes no new legs either way.
	Down       bool   `json:"down"`
	Cordoned   bool   `json:"cordoned,omitempty"`
	Generation uint64 `json:"generation"`
	// ProcessStart is the engine's process_start_time_seconds as last
	// probed (0: not yet read): a new leader's baseline for a restart.
	ProcessStart float64 `json:"process_start_s,omitempty"`
	// PrefillLegs and DecodeLegs are the legs resident there. PrefillTokens
	// is the core's estimate of the resident prompt tokens; DecodeTokens
	// the resident decode context (prompts and tokens produced so far) as
	// the relays count it at the snapshot.
	PrefillLegs   int   `json:"prefill_legs"`
	PrefillTokens int64 `json:"prefill_tokens"`
	DecodeLegs    int   `json:"decode_legs"`
	DecodeTokens  int64 `json:"decode_tokens"`
	// HandoffsPending counts requests whose prompt this engine prefilled
	// and whose decode leg elsewhere has not had its first token yet: the
	// KV it still holds for them (a cordoned engine is drained once this
	// and its legs are 0).
	HandoffsPending int `json:"handoffs_pending"`
	// MeanIntervalSeconds is the monitor's last mean decode gap.
	MeanIntervalSeconds float64 `json:"mean_interval_s"`
	// Covers names the down or cordoned engine whose role this one was
	// moved into (cause engine_down); it goes back to the other phase when
	// that engine returns. Absent when it covers none.
	Covers string `json:"covers,omitempty"`
	// LastMoveSeconds is when its role last changed (router clock); absent
	// when it never moved.
	LastMoveSeconds *float64 `json:"last_move_s,omitempty"`
}

func (o *owner) snapshot(now event.Time) State {
	v := o.core.View()
	s := State{Arm: o.core.Controller().Name(), NowSeconds: now.Seconds(), Split: map[string]int{}, SplitOnline: map[string]int{},
		Moves: o.moves, Counts: o.counts}
	// Each engine's resident decode context as the relays count it now:
	// the core's own figure is as of its last observation, which an arm
	// that never ticks (a static split) takes only at placements. (Read
	// here for display only: telling the core would make its decisions
	// depend on when an operator polls.)
	decodeCtx, _ := o.residentDecode()
	pending := make([]int, len(o.r.engines))
	for _, f := range o.active {
		if f.stage == core.StageDecode && f.decode != f.prefill && f.prefill != event.NoInstance && f.firstAt == 0 {
			pending[f.prefill]++
		}
	}
	for i, e := range o.r.engines {
		in := v.Instance(event.Instance(i))
		s.Split[in.Role.String()]++
		if in.Online(now) {
			s.SplitOnline[in.Role.String()]++
		}
		cordoned := e.cordoned.Load()
		es := EngineState{Name: e.name, URL: e.base, Role: in.Role.String(), Online: in.Online(now),
			Down: in.Down && !cordoned || cordoned && e.br.ejected(), Cordoned: cordoned,
			// A restart seen while cordoned: the generation it rejoins at
			// (published, so a new leader keeps it).
			Generation: max(in.Generation, o.heldGen[i]), HandoffsPending: pending[i], PrefillLegs: in.PrefillCount, PrefillTokens: in.PrefillTokens,
			DecodeLegs: in.DecodeCount, DecodeTokens: decodeCtx[i], MeanIntervalSeconds: in.MeanInterval}
		if c, ok := v.Covers(event.Instance(i)); ok {
			es.Covers = o.r.engines[c].name
		}
		if in.Moved {
			t := in.LastMove.Seconds()
			es.LastMoveSeconds = &t
		}
		e.br.mu.Lock()
		es.ProcessStart = e.br.startSeen
		e.br.mu.Unlock()
		s.Engines = append(s.Engines, es)
	}
	return s
}
