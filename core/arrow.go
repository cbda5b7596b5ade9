package core

import (
	"fmt"
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Loads and costs of Arrow (arXiv:2505.11916) §5.3 and §5.5. Loads are
// ratios to the SLOs, never raw counts: 1.0 means "at the objective".

// PrefillLoad is instance i's prefill load (Arrow §5.5): the larger of its
// resident prefill work and that work's average over the last monitor
// interval, as a share of the TTFT SLO.
func (c *View) PrefillLoad(i event.Instance) float64 {
	in := &c.inst[i]
	return math.Max(in.PrefillWork, in.MeanPrefillWork) / c.ttftS
}

// DecodeLoad is instance i's decode load (Arrow §5.5): its mean decode gap
// over the last interval, 0 at the profile's empty-batch floor and 1 at the
// TPOT SLO. An instance with no decode residents has load 0. When the floor
// already misses the SLO the raw ratio gap/SLO is used.
func (c *View) DecodeLoad(i event.Instance) float64 {
	in := &c.inst[i]
	if in.DecodeCount == 0 {
		return 0
	}
	floor := in.Profile.Interval(0)
	if floor >= c.tpotS {
		return in.MeanInterval / c.tpotS
	}
	return math.Max(0, in.MeanInterval-floor) / (c.tpotS - floor)
}

// PoolLoad is the mean load of a pool (Arrow §5.5). The prefill pool is
// every online instance labelled prefill or still holding prefill work; the
// decode pool is every online decode-labelled instance. An empty pool has
// load 0.
func (c *View) PoolLoad(r event.Role) float64 {
	var sum float64
	n := 0
	for i := range c.inst {
		in := &c.inst[i]
		if !in.Online(c.now) {
			continue
		}
		switch {
		case r == event.RolePrefill && (in.Role == event.RolePrefill || in.PrefillCount > 0):
			sum += c.PrefillLoad(event.Instance(i))
		case r == event.RoleDecode && in.Role == event.RoleDecode:
			sum += c.DecodeLoad(event.Instance(i))
		default:
			continue
		}
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Cost is Arrow §5.3's lexicographic cost pair: the other phase's pressure
// first, then this phase's work.
type Cost [2]float64

// Less orders costs lexicographically.
func (a Cost) Less(b Cost) bool {
	if a[0] != b[0] {
		return a[0] < b[0]
	}
	return a[1] < b[1]
}

// PrefillCost prices r's prefill on i (Arrow §5.3): (resident decode
// tokens, summed prefill seconds of the residents plus r). With prefix
// awareness, r costs T(n) − T(cached) where its prefix is cached.
func (c *View) PrefillCost(i event.Instance, r Request) Cost {
	in := &c.inst[i]
	own := in.Profile.PrefillSpan(c.cachedOn(i, r), r.InputTokens)
	return Cost{float64(in.DecodeTokens), in.PrefillWork + own}
}

// DecodeCost prices r's decode leg on i (Arrow §5.3): (resident prefill
// tokens, resident decode tokens plus r's context minus MT).
func (c *View) DecodeCost(i event.Instance, r Request) Cost {
	in := &c.inst[i]
	return Cost{float64(in.PrefillTokens), float64(in.DecodeTokens) + float64(r.InputTokens+1) - c.MaxTokens(i)}
}

// placeOptions steers Algorithm 1.
type placeOptions struct {
	// flip lets Algorithm 1 flip an instance inline when nothing meets the
	// SLO (line 13); the adaptive controllers own moves and leave it off.
	flip bool
	// shrink is Algorithm 1's D→P guard: flip toward prefill only while
	// the decode pool's load is below it.
	shrink float64
	// flipper performs the flip (Algorithm 3).
	flipper func(c *View, to event.Role, cause event.Cause, why string) event.Instance
}

// algorithm1 places one leg of r (Arrow §5.3, Algorithm 1). decode says
// which leg. It returns the chosen instance.
func (c *View) algorithm1(r Request, decode bool, opt placeOptions) event.Instance {
	// Line 3: a decode leg stays where its KV is when that instance now
	// holds the decode role.
	if decode && r.PrefillInst >= 0 {
		if in := &c.inst[r.PrefillInst]; in.Role == event.RoleDecode && in.Online(c.now) {
			return r.PrefillInst
		}
	}
	want := event.RolePrefill
	if decode {
		want = event.RoleDecode
	}
	best, bestOK, ok := c.indexed(r, decode, want)
	if ok && checkIndex {
		indexChecks++
		for i := range c.inst {
			if c.now < c.inst[i].OfflineUntil {
				offlineChecks++ // answered with an engine offline
				break
			}
		}
		b, o := c.scan(r, decode, want)
		if b != best || o != bestOK {
			panic(fmt.Sprintf("core: placement index chose %d/%d, the scan %d/%d (request %d, decode %v)", best, bestOK, b, o, r.ID, decode))
		}
	}
	if !ok {
		best, bestOK = c.scan(r, decode, want)
	}
	if bestOK != event.NoInstance { // line 7
		return bestOK
	}
	if opt.flip { // line 13: nothing meets the SLO; try to grow this pool
		if decode || c.PoolLoad(event.RoleDecode) < opt.shrink {
			why := fmt.Sprintf("no %s instance meets the SLO for request %d", want, r.ID)
			if f := opt.flipper(c, want, event.CauseInline, why); f != event.NoInstance {
				return f
			}
		}
	}
	return best // line 16
}

// checkIndex makes every indexed placement also scan and panic on a
// difference (tests set it).
var checkIndex bool

// offlineChecks counts those checked while an engine was offline.
var offlineChecks int

// indexChecks counts the placements checked.
var indexChecks int

// scan is Algorithm 1's linear search of the pool for one leg of r (decode
// says which): the least cost, and the least meeting the SLO (a prefill
// within the TTFT SLO; a decode leg whose context fits under MT), lowest
// index first on ties.
func (c *View) scan(r Request, decode bool, want event.Role) (best, bestOK event.Instance) {
	pool := c.pool(want)
	best, bestOK = event.NoInstance, event.NoInstance
	var bestCost, bestOKCost Cost
	for _, i := range pool {
		var k Cost
		var meets bool
		if decode {
			k = c.DecodeCost(i, r)
			meets = k[1] <= 0
		} else {
			k = c.PrefillCost(i, r)
			meets = k[1] <= c.ttftS
		}
		if best == event.NoInstance || k.Less(bestCost) {
			best, bestCost = i, k
		}
		if meets && (bestOK == event.NoInstance || k.Less(bestOKCost)) {
			bestOK, bestOKCost = i, k
		}
	}
	return best, bestOK
}

// pool returns the online instances holding role r, or every online
// serving instance when none does (Arrow §5.5: an empty pool falls back to
// the fleet), or every serving instance when none is online.
func (c *View) pool(r event.Role) []event.Instance {
	c.scratch = c.scratch[:0]
	for i := range c.inst {
		if in := &c.inst[i]; in.Role == r && in.Online(c.now) {
			c.scratch = append(c.scratch, event.Instance(i))
		}
	}
	// Idle engines (RoleNone: no replica runs there) never serve.
	if len(c.scratch) == 0 {
		for i := range c.inst {
			if in := &c.inst[i]; in.Online(c.now) && in.Role != event.RoleNone {
				c.scratch = append(c.scratch, event.Instance(i))
			}
		}
	}
	if len(c.scratch) == 0 {
		for i := range c.inst {
			if c.inst[i].Role != event.RoleNone {
				c.scratch = append(c.scratch, event.Instance(i))
			}
		}
	}
	if len(c.scratch) == 0 {
		for i := range c.inst {
			c.scratch = append(c.scratch, event.Instance(i))
		}
	}
	return c.scratch
}

// owned places both legs with Algorithm 1 without inline flips: the
// controllers that own every role move (adaptive, planner, scheduled)
// embed it.
type owned struct{}

// PlacePrefill implements Controller: Algorithm 1, no inline flips.
func (owned) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	return c.algorithm1(r, false, placeOptions{}), event.CauseNone
}

// PlaceDecode implements Controller: Algorithm 1, local when possible.
func (owned) PlaceDecode(c *View, r Request) event.Instance {
	return c.algorithm1(r, true, placeOptions{})
}
