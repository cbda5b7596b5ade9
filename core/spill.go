package core

import (
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// SpillConfig is burst spill (issue 10, fifteenth round): when Algorithm 1
// finds no prefill engine that starts a prompt within the TTFT SLO (Arrow
// §5.3, the case line 13 answers with an inline flip), the prompt runs on
// a decode engine that can absorb it, keeping its role: the engine chunks
// the prompt between its streams' iterations and then decodes the answer
// where the KV already is (Algorithm 1's line 3), so no KV crosses and no
// engine moves. A burst of document prompts is the case: moving an engine
// to prefill for it takes the move's evidence and offline time and then
// has to move back, while the decode pool's spare iterations are there
// now. A zero SpillConfig turns it off.
type SpillConfig struct {
	// TTFT is the share of the TTFT SLO the prompt's projected first token
	// on the decode engine must meet (default 0.8): the engine's resident
	// prefill work, the prompt's own span, and one decode iteration at the
	// engine's resident context for each chunk the prompt takes.
	TTFT float64
	// TPOT is the share of the TPOT SLO the resident streams' projected
	// mean interval must stay within (default 0.8): the engine's measured
	// (or profiled) interval, plus the stall (resident prefill work and
	// the prompt's span) spread over the streams' mean life.
	TPOT float64
	// Harm weighs the stall in that projection (default 1).
	Harm float64
	// Busy is the most prompts a decode engine holding streams absorbs at
	// once (default 1; 0: no cap beyond the two projections). An idle
	// decode engine takes as many as its TTFT projection allows. On the
	// development seeds stacking prompts on busy engines gave the bursts
	// of documents more (chatdoc b8 1.35 -> 1.43 req/s) but cost the
	// demo trace's bursty cases 2-3%: the streams resident now take every
	// stacked stall, which the mean-life projection spreads too thin.
	Busy int
	// Chunk is the engine's prefill chunk in tokens (default 2048, the
	// engines' chunk_tokens default, engine.DefaultChunkTokens).
	Chunk int
}

// DefaultSpill is the adaptive and scheduled arms' burst spill.
var DefaultSpill = SpillConfig{TTFT: 0.8, TPOT: 0.8, Harm: 1, Busy: 1, Chunk: 2048}

// spiller places a prompt on a decode engine when no prefill engine
// starts it in time (SpillConfig). It learns the decode streams' life from
// the requests that end, so a controller that embeds it feeds it every
// ending (Finished).
type spiller struct {
	cfg SpillConfig
	// steps and ctx are exponentially decayed sums over ended requests of
	// output·(input + output/2) and (input + output/2); their ratio is the
	// context-weighted mean answer length in decode steps (the mean life
	// of a unit of resident context). at is when they were last decayed.
	steps, ctx float64
	at         event.Time
}

// lifeMemory is the decay time of the streams' life estimate: the demand
// estimator's short window (AdaptiveConfig.Window's default).
const lifeMemory = 20 * event.Second

// finished learns from one ended request.
func (s *spiller) finished(now event.Time, r Request) {
	if s.cfg.TTFT <= 0 || r.OutputTokens <= 0 {
		return
	}
	if s.ctx > 0 && now > s.at {
		d := math.Exp(-(now - s.at).Seconds() / lifeMemory.Seconds())
		s.steps *= d
		s.ctx *= d
	}
	s.at = now
	held := float64(r.InputTokens) + float64(r.OutputTokens)/2
	s.steps += float64(r.OutputTokens) * held
	s.ctx += held
}

// life is the resident streams' mean life in decode steps (0 while no
// request has ended).
func (s *spiller) life() float64 {
	if s.ctx <= 0 {
		return 0
	}
	return s.steps / s.ctx
}

// place returns the decode engine that absorbs r's prompt when chosen,
// Algorithm 1's choice for it, is not a prefill engine that starts it
// within the TTFT SLO; NoInstance when spill is off, not needed, or no
// decode engine can take it. Among those that can, it picks the one with
// the fewest streams, then the earliest first token, then the lowest index.
func (s *spiller) place(c *View, r Request, chosen event.Instance) event.Instance {
	cfg := s.cfg
	if cfg.TTFT <= 0 || chosen == event.NoInstance {
		return event.NoInstance
	}
	if c.inst[chosen].Role == event.RolePrefill && c.PrefillCost(chosen, r)[1] <= c.ttftS {
		return event.NoInstance
	}
	chunk := cfg.Chunk
	if chunk <= 0 {
		chunk = DefaultSpill.Chunk
	}
	life := s.life()
	best := event.NoInstance
	var bestN int
	var bestT float64
	for j := range c.inst {
		in := &c.inst[j]
		if in.Role != event.RoleDecode || !in.Online(c.now) {
			continue
		}
		if cfg.Busy > 0 && in.DecodeCount > 0 && in.PrefillCount >= cfg.Busy {
			continue
		}
		own := in.Profile.PrefillSpan(c.cachedOn(event.Instance(j), r), r.InputTokens)
		iter := 0.0
		if in.DecodeCount > 0 {
			iter = in.Profile.Interval(in.DecodeTokens)
		}
		chunks := math.Ceil(float64(r.InputTokens) / float64(chunk))
		ttft := in.PrefillWork + own + chunks*iter
		if ttft > c.ttftS*cfg.TTFT {
			continue
		}
		if in.DecodeCount > 0 {
			if life <= 0 {
				continue // no evidence yet of what a stall costs the streams
			}
			gap := math.Max(in.MeanInterval, iter)
			if gap+cfg.Harm*(in.PrefillWork+own)/life > c.tpotS*cfg.TPOT {
				continue
			}
		}
		if best == event.NoInstance || in.DecodeCount < bestN || (in.DecodeCount == bestN && ttft < bestT) {
			best, bestN, bestT = event.Instance(j), in.DecodeCount, ttft
		}
	}
	return best
}

// placeSpilling is Algorithm 1's prefill placement (Arrow §5.3) with burst
// spill: the controllers that own their moves (adaptive, scheduled) place
// prompts with it.
func (s *spiller) placeSpilling(c *View, r Request) (event.Instance, event.Cause) {
	i := c.algorithm1(r, false, placeOptions{})
	if j := s.place(c, r, i); j != event.NoInstance {
		return j, event.CauseSpilled
	}
	return i, event.CauseNone
}
