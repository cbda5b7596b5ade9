package core

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// SpillConfig is burst spill (issue 10, fifteenth round): when Algorithm 1
// finds no prefill engine that starts a prompt within the TTFT SLO (Arrow
// §5.3, the case line 13 answers with an inline flip), the prompt runs on
// an idle decode engine, one holding no decode streams, keeping its role:
// the engine computes the prompt and then decodes the answer where the KV
// already is (Algorithm 1's line 3), so no KV crosses, no engine moves and
// no stream is stalled. A burst of document prompts is the case: moving
// an engine to prefill for it takes the move's evidence and then has to
// move back, while the decode pool's idle engines are there now.
//
// Engines holding streams are left alone: spilling onto them too (pricing
// the stall against the streams' life) gave the adaptive arm more on the
// development seeds (chatdoc in batches of 8: 0.95 -> 1.35 req/s) but gave
// a static split more still (steady, 1P7D with Algorithm 1: 7.8 -> 8.8
// req/s against adaptive's 8.2), since it turns a decode pool's slack into
// prefill capacity that the adaptive arm's projections do not count (see
// docs/controllers.md). A zero SpillConfig turns spill off.
type SpillConfig struct {
	// TTFT is the share of the TTFT SLO within which the idle decode
	// engine must start the prompt (default 0.8): its resident prefill
	// work (prompts spilled to it before) plus the prompt's own span.
	TTFT float64
}

// DefaultSpill is the burst spill of the arms that place by Algorithm 1
// (adaptive, the scheduled arms, static:kPmD/alg1).
var DefaultSpill = SpillConfig{TTFT: 0.8}

// spill returns the idle decode engine that absorbs r's prompt when
// chosen, Algorithm 1's choice for it, is not a prefill engine that starts
// it within the TTFT SLO; NoInstance when spill is off, not needed, or no
// idle decode engine starts it within cfg.TTFT of the SLO. Among those
// that can, it picks the earliest first token, then the lowest index.
func (c *View) spill(cfg SpillConfig, r Request, chosen event.Instance) event.Instance {
	if cfg.TTFT <= 0 || chosen == event.NoInstance {
		return event.NoInstance
	}
	if c.inst[chosen].Role == event.RolePrefill && c.PrefillCost(chosen, r)[1] <= c.ttftS {
		return event.NoInstance
	}
	limit := c.ttftS * cfg.TTFT
	if j, ok := c.indexedSpill(r); ok {
		if checkIndex {
			spillChecks++
			if s := c.spillScan(limit, r); s != j && (s != event.NoInstance || c.spillTTFT(j, r) <= limit) {
				panic(fmt.Sprintf("core: spill index chose %d, the scan %d (request %d)", j, s, r.ID))
			}
		}
		if j == event.NoInstance || c.spillTTFT(j, r) > limit {
			return event.NoInstance
		}
		return j
	}
	return c.spillScan(limit, r)
}

// spillChecks counts the spill choices checked against the scan.
var spillChecks int

// spillTTFT is when idle decode engine j would start r's first token:
// its resident prefill work (prompts spilled to it before) plus r's span.
func (c *View) spillTTFT(j event.Instance, r Request) float64 {
	in := &c.inst[j]
	return in.PrefillWork + in.Profile.PrefillSpan(c.cachedOn(j, r), r.InputTokens)
}

// spillScan is spill's pass over the fleet: the idle decode engine whose
// first token for r comes earliest within limit seconds, lowest index among
// equals; NoInstance when none.
func (c *View) spillScan(limit float64, r Request) event.Instance {
	best := event.NoInstance
	var bestT float64
	for j := range c.inst {
		in := &c.inst[j]
		if in.Role != event.RoleDecode || !in.Online(c.now) || in.DecodeCount > 0 {
			continue
		}
		ttft := c.spillTTFT(event.Instance(j), r)
		if ttft > limit {
			continue
		}
		if best == event.NoInstance || ttft < bestT {
			best, bestT = event.Instance(j), ttft
		}
	}
	return best
}

// placeSpilling is Algorithm 1's prefill placement without inline flips
// (Arrow §5.3) with burst spill: the arms that place as the adaptive arm
// does use it.
func (c *View) placeSpilling(cfg SpillConfig, r Request) (event.Instance, event.Cause) {
	i := c.algorithm1(r, false, placeOptions{})
	if j := c.spill(cfg, r, i); j != event.NoInstance {
		return j, event.CauseSpilled
	}
	return i, event.CauseNone
}
