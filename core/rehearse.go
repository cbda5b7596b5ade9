package core

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Rehearser replays the fleet's recent arrivals under candidate splits on
// a model of the fleet and says how many of them would have qualified
// (issue 10, twenty-second round). The core has no model of its own: the
// drivers attach one (sim.Rehearser, the simulator itself, in the sim
// command, the replays and the live router). It sees only what the
// router sees: each prompt's length and prefix at arrival, each answer's
// length when it ends.
type Rehearser interface {
	// Arrived records a request at its arrival.
	Arrived(now event.Time, r Request)
	// Finished records an answer's length when its request ends.
	Finished(r Request)
	// Qualified replays the window's arrivals at or after from (all of
	// the window's with from 0) on the current split (prefill engine
	// count; 0 is aggregated serving, every engine taking both phases as
	// the aggregated arm places them; -k is hybrid serving, k prefill
	// engines and the rest mixed, as hybrid:kPmM places them) and on
	// each of others. It returns
	// how many of the replayed requests qualify on both SLOs on the
	// current split (cur) and on each other split (counts), and how many
	// were replayed; counts nil when there is nothing to replay. A count
	// below cur + gain(replayed) may be any value below it: a replay can
	// stop as soon as it cannot reach that.
	Qualified(now, from event.Time, current int, others []int, gain func(replayed int) int) (cur int, counts []int, replayed int)
}

// Replayer is a Rehearser that can also replay the window whether or not
// the fleet delivered it (Qualified replays only while it missed), every
// count exact: the adaptive controller asks it before the scoring pass
// takes the fleet to hybrid serving (twenty-ninth round).
type Replayer interface {
	Replay(now event.Time, current int, others []int) (cur int, counts []int, replayed int)
}

// RehearsalConfig is the adaptive controller's rehearsal: every Step, when
// the scoring pass did not move and the last move is at least Dwell old,
// the current split and its two neighbours are replayed (Rehearser) over
// the last Window of arrivals, repeated Tiles times so that a queue the
// window builds is carried into its repeat. The fleet moves to the
// neighbour that qualifies the most, when it qualifies at least Margin of
// the replayed requests (and MinGain requests) more than the current split,
// when Confirmations rehearsals in a row named it, and unless the
// controller's own projection (ScoreSplit) prices it outside the SLOs (a
// score of 1 or more) and worse than the current split. The rehearser
// replays only while the fleet missed at least Margin (and MinGain) of the
// requests that ended in the window. A zero Step turns it off, as does a
// controller with no Rehearser attached.
//
// Aggregated serving is rehearsed beside the neighbours (issue 10,
// twenty-fifth round) on one mix of prompts: over the window once no
// change of mix has been seen for the controller's LongWindow, before
// that over the window's part since the change began once it is OneMix
// long (twenty-sixth round); and over the whole window, change or not,
// while arrivals come in clumps of at least StraddleClump (thirty-fifth
// round). Taken, every engine is
// relabelled to run both phases (event.RoleMixed), prompts go where the
// aggregated arm sends them and decode where they ran. While the fleet is
// aggregated the scoring pass, whose projections price splits only, does
// not run; the rehearsal replays the split the fleet left and its two
// neighbours against it, and the fleet leaves for the one that qualifies
// the most by LeaveMargin, with the same confirmations. Hybrid serving
// with one prefill engine fewer than the split (twenty-ninth round; see
// Adaptive.hybrid) is rehearsed, taken and left the same way, over the
// whole window only.
type RehearsalConfig struct {
	Step, Dwell, Window event.Time
	Tiles               int
	Margin              float64
	MinGain             int
	// LeaveMargin is the margin a split must clear to take the fleet
	// out of aggregated serving (at least Margin; 0: Margin).
	LeaveMargin float64
	// OneMix: while the window straddles a change of mix, aggregated
	// serving is rehearsed on the window's part since the change began
	// once that part is at least OneMix long (0: only once no change of
	// mix has been seen for LongWindow).
	OneMix event.Time
	// Confirmations is how many rehearsals in a row must name the same
	// neighbour before the fleet moves (a change of mix, too new to show
	// in the window, is then in the next one's).
	Confirmations int
	// StraddleClump: while arrivals come in clumps of at least this many
	// (clumpSize of the measured gap SCV), aggregated serving is also
	// rehearsed over a window that straddles a change of mix, the whole
	// window (0: never, one mix only, as above). Every engine
	// prefilling takes a clump of long prompts that a prefill pool
	// queues; waiting for one mix held the fleet on a split for the first
	// minutes of each document phase of chatdoc in batches of 8 (issue
	// 10, thirty-fifth round).
	StraddleClump float64
}

// DefaultRehearsal is the shipped rehearsal.
var DefaultRehearsal = RehearsalConfig{Step: 10 * event.Second, Dwell: 60 * event.Second,
	Window: 120 * event.Second, Tiles: 2, Margin: 0.05, MinGain: 3, Confirmations: 2,
	OneMix: 60 * event.Second, LeaveMargin: 0.10, StraddleClump: 6}

// rehearse is one rehearsal, after a scoring pass that did not move.
func (a *Adaptive) rehearse(c *View) {
	rc := a.Cfg.Rehearsal
	if a.Rehearser == nil || rc.Step <= 0 || c.now < a.rehearseNext {
		return
	}
	a.rehearseNext = c.now + rc.Step
	if a.moved && c.now-a.lastMove < rc.Dwell {
		a.rehearsed, a.rehearsals = 0, 0
		return
	}
	n := len(c.inst)
	p := c.Count(event.RolePrefill)
	around := []int{p - 1, p + 1}
	if a.agg {
		// Aggregated: the split the fleet left and its neighbours.
		p, around = -a.hyb, []int{a.aggFrom - 1, a.aggFrom, a.aggFrom + 1}
	}
	var others []int
	for _, q := range around {
		if q >= 1 && q < n && q >= a.Cfg.MinPrefill && n-q >= a.Cfg.MinDecode {
			others = append(others, q)
		}
	}
	oneMix := !a.mixSeen || c.now-a.lastMix >= a.Cfg.LongWindow
	if !a.agg && oneMix {
		// Aggregated serving, and hybrid serving with one prefill engine
		// fewer, once the window holds one mix of prompts.
		others = append(others, 0)
		if p >= 2 {
			others = append(others, -(p - 1))
		}
	} else if !a.agg && rc.StraddleClump > 0 && clumpSize(arrivalSCV(a.estimate(c))) >= rc.StraddleClump {
		// Arrivals in large clumps: aggregated serving also over a window
		// that straddles a change of mix (thirty-fifth round).
		others = append(others, 0)
	}
	margin := rc.Margin
	if a.agg {
		margin = max(margin, rc.LeaveMargin)
	}
	gain := func(replayed int) int { return max(rc.MinGain, int(margin*float64(replayed))) }
	cur, counts, replayed := a.Rehearser.Qualified(c.now, 0, p, others, gain)
	best, bestV := p, cur
	if len(counts) == len(others) {
		need := cur + gain(replayed)
		for i, q := range others {
			if counts[i] >= need && counts[i] > bestV {
				best, bestV = q, counts[i]
			}
		}
	}
	if best == p && !a.agg && !oneMix && rc.OneMix > 0 && a.mixFrom > 0 && c.now-a.mixFrom >= rc.OneMix {
		// The window straddles a change of mix, but its part since the
		// change began is at least OneMix long: aggregated serving is
		// rehearsed on that part alone.
		c1, k, r := a.Rehearser.Qualified(c.now, a.mixFrom, p, []int{0}, gain)
		if len(k) == 1 && k[0] >= c1+gain(r) {
			best, bestV, cur, replayed = 0, k[0], c1, r
		}
	}
	if best == p {
		a.rehearsed, a.rehearsals = 0, 0
		return
	}
	if best != a.rehearsed {
		a.rehearsed, a.rehearsals = best, 0
	}
	if a.rehearsals++; a.rehearsals < rc.Confirmations {
		return
	}
	a.rehearsed, a.rehearsals = 0, 0
	e := a.estimate(c)
	if p <= 0 || best <= 0 {
		a.aggregate(c, p, best, e, fmt.Sprintf("rehearsal: %s qualifies %d of %d replayed requests, %s %d",
			fleetName(best, n), bestV, replayed, fleetName(p, n), cur))
		return
	}
	cs, bs := ScoreSplit(c, e, p), ScoreSplit(c, e, best)
	if bs.Score() >= 1 && bs.Score() > cs.Score() {
		return // the projection prices the rehearsal's choice out of the SLOs, and worse
	}
	why := fmt.Sprintf("rehearsal: %dP%dD qualifies %d of %d replayed requests, %dP%dD %d (projected %.3f -> %.3f)",
		best, n-best, bestV, replayed, p, n-p, cur, cs.Score(), bs.Score())
	rec := AdaptiveDecision{Controller: "adaptive", Split: splitName(p, n-p), Rate: Ratio(e.Rate),
		PrefillLoad: Ratio(e.PrefillLoad), DecodeSteps: Ratio(e.DecodeSteps), ShortWindow: e.ShortPrefill,
		Candidates: []SplitCandidate{{P: p, TTFT: Ratio(cs.TTFT), TPOT: Ratio(cs.TPOT), Score: Ratio(cs.Score())},
			{P: best, TTFT: Ratio(bs.TTFT), TPOT: Ratio(bs.TPOT), Score: Ratio(bs.Score())}}}
	a.move(c, p, best, n, e, why, func(choice, why string) {
		rec.Choice, rec.Why = choice, why
		c.Decide(rec)
	})
	a.byRehearsal = a.moved && a.lastMove == c.now
}

// guard is why a move of the scoring pass or the burst insurance from p
// prefill engines to q must wait ("" when it may go): within the
// rehearsal's Window of a move the rehearsal made, a move undoing it goes
// only if a replay of the window does not qualify fewer requests on q
// than on p. The projection and the insurance price the traffic with
// formulas that the rehearsal's replay overruled; without the guard they
// took its engine straight back a minute later, and on the Azure traces
// the two undid each other by turns (issue 10, twenty-third round). When
// the fleet delivers the window (the rehearser's gate), or the replay
// cannot be made, the move goes as before. The scoring pass overrides a
// hold when the move answers a confirmed miss (Adaptive.confirmedMiss;
// twenty-eighth round); the insurance, which moves only when every SLO
// is projected met, never does.
func (a *Adaptive) guard(c *View, p, q int) string {
	rc := a.Cfg.Rehearsal
	if a.Rehearser == nil || rc.Step <= 0 || !a.byRehearsal || !a.moved ||
		sign(q-p) != -sign(a.lastDir) || c.now-a.lastMove >= rc.Window {
		return ""
	}
	cur, counts, replayed := a.Rehearser.Qualified(c.now, 0, p, []int{q}, func(int) int { return 0 })
	if len(counts) != 1 || counts[0] >= cur {
		return ""
	}
	return fmt.Sprintf("that undoes the rehearsal's move %.0f s ago, and a replay of the window qualifies fewer of its %d requests on %dP than the %d on %dP",
		(c.now - a.lastMove).Seconds(), replayed, q, cur, p)
}

// fleetName names a split, 0 prefill engines being aggregated serving.
func fleetName(p, n int) string {
	if p == 0 {
		return "aggregated"
	}
	if p < 0 {
		return fmt.Sprintf("%dP%dM", -p, n+p)
	}
	return splitName(p, n-p)
}

// aggregate moves the fleet from a split of p prefill engines to
// aggregated serving (q == 0) or hybrid serving (q < 0: -q prefill
// engines, the rest mixed), or back from either (p <= 0) to q prefill
// engines: every engine is relabelled at once, as a move's engines are
// (resident work stays where it is, Arrow §5.2).
func (a *Adaptive) aggregate(c *View, p, q int, e DemandEstimate, why string) {
	n := len(c.inst)
	moved := 0
	if q < 0 {
		// Hybrid: -q prefill engines stay (pinned ones first, then those
		// holding the most prompt work), every other engine takes both
		// phases.
		keep := map[event.Instance]bool{}
		pinned := 0
		for i := range c.inst {
			if in := &c.inst[i]; in.Role == event.RolePrefill && in.Pinned {
				pinned++
			}
		}
		for _, i := range inCostOrder(c, event.RolePrefill, func(in *Instance) (Cost, bool) {
			return Cost{-float64(in.PrefillTokens)}, true
		}) {
			if len(keep) < -q-pinned {
				keep[i] = true
			}
		}
		for i := range c.inst {
			if c.inst[i].Role == event.RolePrefill && keep[event.Instance(i)] {
				continue
			}
			if c.Move(event.Instance(i), event.RoleMixed, c.now, event.CauseController, why) {
				moved++
			}
		}
	} else if q == 0 {
		for i := range c.inst {
			if c.Move(event.Instance(i), event.RoleMixed, c.now, event.CauseController, why) {
				moved++
			}
		}
	} else {
		// The engines holding prompts first, then the fewest decode
		// tokens (pickMover's order toward prefill), offline ones last.
		cs := inCostOrder(c, event.RoleMixed, func(in *Instance) (Cost, bool) {
			k := moverCost(in, event.RoleDecode)
			if !in.Online(c.now) {
				k[0] = 2
			}
			return k, true
		})
		need := q - c.Count(event.RolePrefill) // pinned prefill engines count
		for j, inst := range cs {
			to := event.RoleDecode
			if j < need {
				to = event.RolePrefill
			}
			if c.Move(inst, to, c.now, event.CauseController, why) {
				moved++
			}
		}
	}
	rec := AdaptiveDecision{Controller: "adaptive", Split: fleetName(p, n), Rate: Ratio(e.Rate),
		PrefillLoad: Ratio(e.PrefillLoad), DecodeSteps: Ratio(e.DecodeSteps), ShortWindow: e.ShortPrefill,
		Candidates: []SplitCandidate{}, Choice: "move " + fleetName(q, n), Why: why}
	if moved == 0 {
		rec.Choice, rec.Why = "stay", "no instance can move"
		c.Decide(rec)
		return
	}
	// A new stint counts its own passes seeing a change of mix: one the
	// rehearsal ended may have left a count behind, and a hybrid stint
	// after it then left on fewer than Confirmations passes.
	a.hybMixPasses = 0
	if q <= 0 {
		a.agg, a.aggFrom, a.hyb = true, p, -q
	} else {
		if a.hyb > 0 {
			a.hybRefuted, a.hybLeft = true, c.now
		}
		a.agg, a.hyb = false, 0
	}
	c.Decide(rec)
	a.proposal, a.confirms = 0, 0
	a.lastMove, a.lastDir, a.moved, a.byRehearsal = c.now, sign(q-p), true, true
	a.moveMix, a.moveLoad, a.moveSE = e.mixNow(), e.PrefillLoad, e.PrefillSE
	a.since.n, a.since.ttftOK, a.since.tpotOK = 0, 0, 0
}
