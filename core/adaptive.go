package core

import (
	"fmt"
	"math"
	"sort"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// AdaptiveConfig holds the adjacent-split controller's knobs. They are the
// same for every trace: the controller is judged against the hindsight
// oracle, never tuned per workload.
type AdaptiveConfig struct {
	// Step is how often the controller scores the splits (default 2 s).
	Step event.Time
	// Window is the demand estimator's short span (default 20 s): it
	// catches a change of traffic quickly.
	Window event.Time
	// LongWindow is its long span for offered prefill work (default 120 s):
	// it gives a steady traffic a precise estimate. The short estimate is
	// used only when it differs from the long one by more than three
	// standard errors, so Poisson noise does not move engines but a phase
	// change does.
	LongWindow event.Time
	// MinArrivals is the evidence needed before acting (default 10).
	MinArrivals int
	// Margin is the least improvement of the score, in SLO-ratio units,
	// that justifies a move (default 0.05).
	Margin float64
	// RelMargin is the least relative improvement (default 0.10), so that
	// noise on a loaded fleet's steep scores does not move engines. It does
	// not apply to a move that brings the score from at or above 1 (an SLO
	// projected broken) to below 1.
	RelMargin float64
	// Confirmations is how many consecutive steps must propose the same
	// move (default 3).
	Confirmations int
	// TransientConfirmations is how many consecutive steps must propose a
	// move that only resident work (a backlog), not the offered demand,
	// justifies (default 10: 20 s at the default step).
	TransientConfirmations int
	// Evidence is the least time between two moves, so each move's effect
	// is observed before the next (default 4 s).
	Evidence event.Time
	// ThrashWindow: reversing the previous move within it needs twice the
	// margins (default 60 s); toward a split that cannot carry the offered
	// demand either, it waits the window out unless the mix of prompts or
	// the offered load moved its way (see Adaptive.overloadReversal).
	ThrashWindow event.Time
	// MinPrefill and MinDecode are pool floors (default 1 each).
	MinPrefill, MinDecode int
	// Attainment is the delivered-attainment check (default 0.9, the
	// goodput target; 0 turns it off): when fewer than this share of the
	// requests that ended in the estimate's window met an SLO, while the
	// current split's projection of that SLO is under 1, the projection is
	// wrong about the split the fleet is on, and that SLO's projections,
	// the current split's and every candidate's, are scaled up by the one
	// factor that brings the current split's to 1. The ordering of the
	// candidates on that SLO is kept; what changes is that the missed SLO
	// can now decide the score, and a move away from a split projected at
	// 1 is a crossing (issue 10, fifth round). Within the long window of
	// a move, only requests that arrived after the move count: the others
	// were served in part by the split before it (sixth round). A miss
	// counts only while the short window's endings, when at least
	// MinArrivals of them, show it too (thirtieth round; see
	// DemandEstimate.ttftMissed); so do the opening split's answer and
	// the guard's confirmed miss, which read the same shares.
	Attainment float64
	// BurstZ turns on the burst insurance (see Adaptive.insure; default 2,
	// 0 turns it off): when every split scored meets both SLOs, a split is
	// judged by its headroom, the multiple of the offered load it still
	// meets them at, and the fleet moves toward the split that rides the
	// busiest BurstHorizon BurstZ standard deviations above the mean
	// arrivals (issue 10, ninth round).
	BurstZ float64
	// BurstHorizon is the span of the bursts insured against (default 60 s,
	// the thrash window: a move must pay for itself over it).
	BurstHorizon event.Time
	// Memory is how long the insurance remembers the traffic's mixes and
	// the requests that missed each SLO (default 600 s).
	Memory event.Time
	// OpeningShare is the opening's answer to a delivered miss (default 4;
	// 0 turns it off). Until its first move the fleet sits on its opening
	// split, which no evidence chose (a split resumed from a leader,
	// Config.Opening, gets no such answer). When the delivered-attainment check
	// finds fewer than Attainment of its ten or more ended requests meeting
	// one SLO, and that SLO's misses over Memory outnumber the other's more
	// than OpeningShare to one, the neighbour that adds an engine to that
	// SLO's pool, projecting it lower and the other SLO under 1, is moved
	// to as a crossing: by the absolute margin alone, not widened for
	// bursts, and after Confirmations, not TransientConfirmations (issue
	// 10, eighteenth round: on the Azure code trace the fleet sat on its
	// opening 4P4D through the first surges, each proposal of 5P3D waiting
	// for ten confirmations that the next silence reset).
	OpeningShare float64
	// Spill is burst spill (default DefaultSpill; zero turns it off): a
	// prompt no prefill engine starts within the TTFT SLO runs on an idle
	// decode engine (see SpillConfig; issue 10, fifteenth round).
	Spill SpillConfig
	// Rehearsal replays the last arrivals under the neighbouring splits on
	// the attached Rehearser (default DefaultRehearsal; see
	// RehearsalConfig; issue 10, twenty-second round).
	Rehearsal RehearsalConfig
}

// DefaultAdaptive is the adaptive arm's configuration.
var DefaultAdaptive = AdaptiveConfig{Step: 2 * event.Second, Window: 20 * event.Second, MinArrivals: 10,
	Margin: 0.05, RelMargin: 0.10, Confirmations: 3, TransientConfirmations: 10, Evidence: 4 * event.Second,
	ThrashWindow: 60 * event.Second, MinPrefill: 1, MinDecode: 1, LongWindow: 120 * event.Second,
	Attainment: ttftQuantile, BurstZ: 2, BurstHorizon: 60 * event.Second, Memory: 600 * event.Second,
	OpeningShare: 4, Spill: DefaultSpill, Rehearsal: DefaultRehearsal}

// Adaptive is the role controller narwhal-bench is built around. Every Step
// it scores the current split and each adjacent split one engine away. A
// split's score is its worst projected SLO ratio: projected TTFT over the
// TTFT SLO (prefill queueing from the offered prefill work, and the
// resident backlog drained by the new pool) and projected decode interval
// over the TPOT SLO (from the offered decode work by Little's law, and from
// the resident decode context spread over the new pool). It moves one
// engine only when a neighbour improves the score by the margins, for the
// configured confirmations, after the evidence span since its last move.
// Placement is Algorithm 1 without inline flips (Arrow §5.3); resident
// requests finish on their engines.
type Adaptive struct {
	owned
	Cfg      AdaptiveConfig
	demand   Demand
	next     event.Time
	proposal int // proposed prefill count, 0 = none
	confirms int
	lastMove event.Time
	lastDir  int // +1 toward prefill, -1 toward decode, 0 none yet
	moved    bool
	// moveMix is the short window's mix of prompts at the last move, and
	// moveLoad and moveSE the offered prefill load the move was decided on
	// with its standard error.
	moveMix          promptMix
	moveLoad, moveSE float64
	// mem is the burst insurance's memory (see insure).
	mem memory
	// mixSeen and lastMix: a change of mix was seen, and when last.
	mixSeen bool
	lastMix event.Time
	// since counts the requests that ended since the last move and
	// arrived after it, and how many of them met each SLO: the
	// delivered-attainment check's evidence about the split the fleet is
	// on (see AdaptiveConfig.Attainment).
	since struct{ n, ttftOK, tpotOK int }

	// Rehearser, when set, is the model the rehearsal replays recent
	// arrivals on (see RehearsalConfig); the drivers attach the simulator.
	Rehearser    Rehearser
	rehearseNext event.Time
	// rehearsed is the neighbour the last rehearsals named, rehearsals
	// how many in a row.
	rehearsed, rehearsals int
	// byRehearsal: the last move was a rehearsal's (see guard).
	byRehearsal bool
	// mixFrom is when the last change of mix began (the first pass to see
	// one after Step without): since then counts only requests that
	// arrived after it too, as after a move.
	mixFrom event.Time
	// agg: the rehearsal moved the fleet to aggregated serving (every
	// engine both phases) from a split of aggFrom prefill engines.
	agg     bool
	aggFrom int
	// hyb: while agg, the fleet is hybrid (Hybrid) with hyb prefill
	// engines, the rest mixed; 0 is aggregated serving. hybConfirms
	// counts the pass's proposals of it in a row (see hybrid);
	// hybMixPasses the passes in a row that saw a change of mix while
	// hybrid (see Tick).
	hyb          int
	hybConfirms  int
	hybMixPasses int
	// hybRefuted: a replay rated the hybrid worse than the split at the
	// pass's proposal, or the rehearsal took the fleet out of it, at
	// hybLeft; the pass proposes none until a change of mix after it.
	hybRefuted bool
	hybLeft    event.Time
}

// Name implements Controller.
func (a *Adaptive) Name() string { return "adaptive" }

// PlacePrefill implements Controller: Algorithm 1 without inline flips
// (Arrow §5.3), with burst spill (AdaptiveConfig.Spill).
func (a *Adaptive) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	if a.agg && a.hyb > 0 {
		return placeHybridPrefill(c), event.CauseNone
	}
	if a.agg {
		return Aggregated{}.PlacePrefill(c, r)
	}
	return c.placeSpilling(a.Cfg.Spill, r)
}

// PlaceDecode implements Controller: Algorithm 1, local when possible;
// aggregated, where the prompt ran.
func (a *Adaptive) PlaceDecode(c *View, r Request) event.Instance {
	if a.agg && a.hyb > 0 {
		return placeHybridDecode(c, r)
	}
	if a.agg && r.PrefillInst >= 0 && c.inst[r.PrefillInst].Role == event.RoleMixed {
		return r.PrefillInst
	}
	return a.owned.PlaceDecode(c, r)
}

// Init implements Controller.
func (a *Adaptive) Init(c *View) error {
	if len(c.inst) < 2 {
		return fmt.Errorf("adaptive: %d instance: expected at least 2", len(c.inst))
	}
	if a.Cfg == (AdaptiveConfig{}) {
		a.Cfg = DefaultAdaptive
	}
	a.demand.Span = max(a.Cfg.Window, a.Cfg.LongWindow)
	a.demand.meanT, a.demand.same = nil, 0 // this fleet's profiles
	a.next = a.Cfg.Step
	evenSplit(c)
	return nil
}

// Arrived feeds the demand estimator.
func (a *Adaptive) Arrived(c *View, r Request) {
	a.demand.arrived(c, r)
	if a.Rehearser != nil {
		a.Rehearser.Arrived(c.now, r)
	}
}

// Finished feeds the demand estimator.
func (a *Adaptive) Finished(c *View, r Request) {
	a.demand.finished(c, r)
	if a.Rehearser != nil {
		a.Rehearser.Finished(r)
	}
	if a.Cfg.Memory > 0 {
		a.mem.ended(c.now, r.TTFT == event.Never || r.TTFT > c.slo.TTFT, r.TPOT != event.Never && r.TPOT > c.slo.TPOT)
	}
	if !a.moved && a.mixFrom == 0 || r.TTFT == event.Never {
		return
	}
	// The request's arrival: its end less its first-token time and its
	// later tokens' mean interval times their count (TPOT's definition).
	arr := c.now - r.TTFT
	if r.TPOT != event.Never && r.OutputTokens > 1 {
		arr -= r.TPOT * event.Time(r.OutputTokens-1)
	}
	if arr < max(a.lastMove, a.mixFrom) {
		return // served in part by the split before the last move, or of the old mix
	}
	a.since.n++
	if r.TTFT <= c.slo.TTFT {
		a.since.ttftOK++
	}
	if r.TPOT == event.Never || r.TPOT <= c.slo.TPOT {
		a.since.tpotOK++
	}
}

// NextTick implements Controller.
func (a *Adaptive) NextTick() event.Time { return a.next }

// SplitScore is one candidate split's projection.
type SplitScore struct {
	Prefill int
	TTFT    float64 // projected TTFT / TTFT SLO: the worse of the two below
	TPOT    float64 // projected decode interval / TPOT SLO: the worse of the two below
	// The steady-state projections, from offered demand.
	TTFTDemand, TPOTDemand float64
	// The transient projections, from work resident now (on the decode
	// side, with the context of the prompts being prefilled).
	TTFTBacklog, TPOTResident float64
}

// Score is the split's worst projected SLO ratio.
func (s SplitScore) Score() float64 { return math.Max(s.TTFT, s.TPOT) }

// Steady is the split's worst steady-state ratio (demand terms only).
func (s SplitScore) Steady() float64 { return math.Max(s.TTFTDemand, s.TPOTDemand) }

// ttftQuantile is the share of requests whose TTFT the prefill projection
// prices: the goodput target (90% of requests within the SLO).
const ttftQuantile = 0.9

// saturation caps utilisation in the queueing formulas; beyond it a
// split's ratio grows linearly and steeply, so overloaded splits still
// compare.
const saturation = 0.99

// horizon is the span, in seconds, over which the prefill projection
// prices a queue that steady state does not describe (see ttftHorizon):
// the default thrash window and burst horizon, the span a move must pay
// for itself over.
const horizon = 60.0

// ScoreSplit projects the SLO ratios of p prefill and n-p decode instances
// under the demand e and the fleet's resident work.
func ScoreSplit(c *View, e DemandEstimate, p int) SplitScore {
	m, ok := newSplitModel(c, e, p)
	s := SplitScore{Prefill: p, TTFT: math.Inf(1), TPOT: math.Inf(1)}
	if !ok {
		return s
	}
	s.TTFTDemand, s.TTFTBacklog = m.ttftDemand(1), m.drain
	s.TTFT = math.Max(s.TTFTDemand, s.TTFTBacklog)
	s.TPOTDemand, s.TPOTResident = m.tpotDemand(1), m.observed
	s.TPOT = math.Max(s.TPOTDemand, s.TPOTResident)
	if e.ttftScale > 0 {
		s.TTFT *= e.ttftScale
	}
	if e.tpotScale > 0 {
		s.TPOT *= e.tpotScale
	}
	return s
}

// splitModel is ScoreSplit's projection of one split, kept so that its
// demand terms can be evaluated at a multiple of the offered load (the
// headroom below) as well as at the load itself.
type splitModel struct {
	p, d              int
	load, mean, v     float64 // offered prefill load, mean prefill time, (c_a² + c_s²)·E[T]
	ca2               float64 // c_a², the arrivals' SCV the wait is priced with
	work, slope, icpt float64 // decode work and the decode profile
	drain, observed   float64 // the transient ratios, from work resident now
	ttftS, tpotS      float64
	// backlog is the prefill work queued or running per prefill engine
	// (seconds), rate the arrival rate and mean2 E[T²]: ttftHorizon's.
	backlog, rate, mean2 float64
	// tpotHorizon's: the context resident and pending per decode engine
	// (tokens), the decode steps a token of context stays for (the
	// ended requests' DecodeSteps over the context they held: their
	// context-weighted mean output; 0 before any ended), and whether the
	// traffic is changing (the short window's prefill estimate in use, or
	// the mix of prompts moved).
	ctx, life float64
	changing  bool
}

func newSplitModel(c *View, e DemandEstimate, p int) (splitModel, bool) {
	n := len(c.inst)
	d := n - p
	if p < 1 || d < 1 {
		return splitModel{}, false
	}
	// Fleet totals, kept by the core as instances change (O(1) here): the
	// mean decode profile, resident prefill work (an exact sum, rounded
	// once), resident decode context and the instances holding any.
	c.fleet.sync(c.inst)
	slope, icpt := c.fleet.means(c.inst)
	backlog := c.fleet.work.float()
	resident, holders, pending := c.fleet.resident, c.fleet.holders, c.fleet.pending
	// Decode work is what recently finished requests needed, or what the
	// context resident now implies, whichever is larger: by Little's law
	// resident context = work × interval, and the interval at the current
	// spread follows from the profile. The second is there from the first
	// decode iteration; the first only once requests finish.
	work := e.DecodeSteps
	if holders > 0 {
		if iv := icpt + slope*float64(resident)/float64(holders); iv > 0 {
			work = math.Max(work, float64(resident)/iv)
		}
	}
	if e.decodeScale > 0 {
		work *= e.decodeScale // robust's decode work one standard error off
	}
	m := splitModel{p: p, d: d, load: e.PrefillLoad, mean: e.MeanPrefill, work: work, slope: slope, icpt: icpt,
		ttftS: c.ttftS, tpotS: c.tpotS, backlog: backlog / float64(p), rate: e.Rate, mean2: e.MeanPrefill2}
	if e.MeanPrefill > 0 {
		// (c_a² + c_s²)·E[T] = c_a²·E[T] + E[T²]/E[T] - E[T].
		m.ca2 = arrivalSCV(e)
		m.v = m.ca2*e.MeanPrefill + e.MeanPrefill2/e.MeanPrefill - e.MeanPrefill
	}
	m.drain = (backlog/float64(p) + e.MeanPrefill) / c.ttftS
	// The resident projection counts the context decode holds now and the
	// context of the prompts being prefilled, which reaches the decode
	// pool within about a TTFT: a burst of long prompts is priced on the
	// decode side before it lands there, not after (a split that thins
	// the decode pool for a prefill burst otherwise looks free until the
	// burst's contexts arrive; issue 10).
	m.observed = (icpt + slope*float64(resident+pending)/float64(d)) / c.tpotS
	m.ctx = float64(resident+pending) / float64(d)
	if e.decodeCtx > 0 {
		m.life = e.DecodeSteps / e.decodeCtx
	}
	m.changing = e.mixShift || e.ShortPrefill
	return m, true
}

// ttftDemand is the steady-state TTFT ratio at k times the offered
// prefill load. The pool is one M/G/p queue, since placement sends each
// prompt to the least-loaded prefill engine rather than splitting the
// arrivals blindly (Allen-Cunneen: the M/M/p wait, Erlang C, scaled by
// (c_a² + c_s²)/2; its mean at p = 1 and c_a² = 1 is
// Pollaczek-Khinchine's), priced at a quantile: the SLO is met request by
// request, so the projection is a quantile of the wait, not its mean: an
// arrival waits with probability C, and then about exponentially with
// mean theta, so the wait's q-quantile is theta·ln(C/(1-q)) when C > 1-q.
// Bursty arrivals wait more often than Erlang C says (see waitProbability);
// the wait's mean stays Allen-Cunneen's. Near and past saturation the
// steady state is not reached within the horizon, and the projection is
// the lower of the steady one and ttftHorizon's.
func (m splitModel) ttftDemand(k float64) float64 {
	rho := k * m.load / float64(m.p)
	r := math.Min(rho, saturation)
	wait := 0.0
	if m.mean > 0 {
		theta := m.v / (2 * float64(m.p) * (1 - r))
		cw := erlangC(m.p, r*float64(m.p))
		if pw := waitProbability(m.p, r, m.ca2, cw); pw > cw {
			theta, cw = cw*theta/pw, pw
		}
		if cw > 1-ttftQuantile {
			wait = theta * math.Log(cw/(1-ttftQuantile))
		}
	}
	steady := (m.mean+wait)/m.ttftS + 100*math.Max(0, rho-saturation)
	return math.Min(steady, m.ttftHorizon(k))
}

// ttftHorizon is the TTFT ratio the prefill pool reaches within the
// horizon at k times the offered prefill load, from the work queued on it
// now: the queue's work per engine grows by rho - 1 seconds a second past
// saturation (a fluid queue), and the arrivals' own variance adds the
// 90th percentile of a reflected random walk's height over the horizon:
// by the reflection principle, z_0.95 = 1.645 standard deviations of the
// work arriving in it, spread over the pool. That work is compound: a
// clump of b prompts (see clumpSize) brings b(b-1) cross terms, so its
// variance is rate·H·(E[T²] + (b-1)·E[T]²).
//
// The steady-state formulas describe a queue only after it relaxes, which
// takes longer the closer it is to saturation (the M/M/1 queue's
// relaxation time grows as 1/(1-sqrt(rho))²); before, the wait is bounded
// by what the horizon can build. Without this bound a pool past
// saturation was priced by the steep line above, whatever its queue: in
// demo's 30 s prefill-heavy phase the controller read a TTFT the requests
// were meeting (5 s against 10) as 28-41 times the SLO, moved an engine
// off decode, broke TPOT and moved it back, and a quarter of the fleet's
// moves on demo reversed within a minute (issue 10, thirteenth round).
func (m splitModel) ttftHorizon(k float64) float64 {
	if m.mean <= 0 {
		return math.Inf(1)
	}
	rho := k * m.load / float64(m.p)
	fluid := math.Max(0, m.backlog+(rho-1)*horizon)
	b := clumpSize(m.ca2)
	v := k * m.rate * horizon * (m.mean2 + (b-1)*m.mean*m.mean)
	wait := fluid + 1.645*math.Sqrt(v)/float64(m.p)
	return (m.mean + wait) / m.ttftS
}

// tpotDemand is the TPOT ratio at k times the offered decode work. Its
// steady state: with interval I = icpt + slope·ctx and resident context
// ctx = work/d · I per instance (Little's law), the fixed point is
// I = icpt / (1 - work·slope/d), and past saturation a steep line. While
// the traffic holds, the projection is the lower of that and
// tpotHorizon's, as the prefill side's is of its steady state and
// ttftHorizon's; while it changes, the steady state alone.
func (m splitModel) tpotDemand(k float64) float64 {
	rhoD := k * m.work * m.slope / float64(m.d)
	rd := math.Min(rhoD, saturation)
	steady := m.icpt/(1-rd)/m.tpotS + 100*math.Max(0, rhoD-saturation)
	if m.changing {
		return steady
	}
	return math.Min(steady, m.tpotHorizon(k))
}

// horizonSteps is how many implicit steps tpotHorizon integrates the
// horizon in.
const horizonSteps = 16

// tpotHorizon is the TPOT ratio the decode pool reaches within the
// horizon at k times the offered decode work w (context-token·steps a
// second per engine), from the context it holds and will hold now. The
// pool is a fluid: context r per engine arrives at w/life tokens a
// second and each token leaves after life steps of I(r) = icpt + slope·r
// seconds, so dr/dt = w/life - r/(life·I(r)). Its fixed point is the
// steady state's (r = w·I(r)); near saturation the context takes many
// lifetimes to get there, and past it (w·slope >= 1) has none and grows
// without bound, which the steady state's line prices by the rate alone,
// whatever the pool holds. The horizon is integrated by backward Euler
// (each step a quadratic in r, stable at any step length), and the
// projection is the interval at its end.
//
// It is not used while the traffic changes (tpotDemand): the decode work
// is measured on requests that ended, so for a request's lifetime after a
// change of traffic it is the old traffic's, and the horizon would price
// the next minute by it. With the horizon there too the fleet moved
// engines to prefill at demo's prefill-heavy phases on the last phase's
// lighter measure and broke TPOT in the next: 11-24 of 100 development
// seeds sustained less on demo; with it only while the traffic holds, none
// did, and 12 seed-cases sustained more, 9 of them steady (issue 10,
// fourteenth round).
func (m splitModel) tpotHorizon(k float64) float64 {
	if m.life <= 0 {
		return math.Inf(1)
	}
	w := k * m.work / float64(m.d)
	// A step of dt seconds takes dt/(life·I) of a token's life: g = dt/life.
	g := horizon / horizonSteps / m.life
	r := m.ctx
	for range horizonSteps {
		// r' = a - g·r'/I(r') with a = r + g·w, that is
		// slope·r'² + (icpt - slope·a + g)·r' - icpt·a = 0.
		a := r + g*w
		if m.slope <= 0 {
			r = m.icpt * a / (m.icpt + g)
			continue
		}
		bq := m.icpt - m.slope*a + g
		r = (-bq + math.Sqrt(bq*bq+4*m.slope*m.icpt*a)) / (2 * m.slope)
	}
	return (m.icpt + m.slope*r) / m.tpotS
}

// Headroom is the largest multiple k of the offered load (prefill load
// and decode work together, at most limit) at which split p still
// projects both SLOs under 1, the work resident now and the
// delivered-attainment factors included; 0 when it breaks one at the
// load itself or cannot be formed. A split's headroom is the burst it
// rides: among splits that all meet the SLOs at the mean load, the one
// with the most headroom is the one a burst of a given size breaks last.
func Headroom(c *View, e DemandEstimate, p int, limit float64) float64 {
	m, ok := newSplitModel(c, e, p)
	if !ok {
		return 0
	}
	ts, ps := 1.0, 1.0
	if e.ttftScale > 0 {
		ts = e.ttftScale
	}
	if e.tpotScale > 0 {
		ps = e.tpotScale
	}
	if m.drain*ts >= 1 || m.observed*ps >= 1 {
		return 0
	}
	return math.Min(largestUnder(func(k float64) float64 { return ts * m.ttftDemand(k) }, limit),
		largestUnder(func(k float64) float64 { return ps * m.tpotDemand(k) }, limit))
}

// largestUnder is the largest k in [0, limit] with f(k) < 1, for f
// increasing in k, by bisection to a thousandth of limit; 0 when f(0)
// is not under 1, limit when f(limit) is.
func largestUnder(f func(float64) float64, limit float64) float64 {
	if f(0) >= 1 {
		return 0
	}
	if f(limit) < 1 {
		return limit
	}
	lo, hi := 0.0, limit
	for hi-lo > limit/1024 {
		mid := (lo + hi) / 2
		if f(mid) < 1 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// attainmentScales applies the delivered-attainment check (see
// AdaptiveConfig.Attainment) to e for the current split p: it sets the
// factor of each SLO that fewer than floor of the window's ended requests
// met while p's projection of it is under 1, so ScoreSplit projects that
// SLO at 1 on p and scales every other split's by the same factor. It
// reports the factors set (1 where none).
func attainmentScales(c *View, e *DemandEstimate, p int, floor float64, min int) (ttft, tpot float64) {
	e.ttftScale, e.tpotScale = 0, 0
	ttft, tpot = 1, 1
	if floor <= 0 || e.Finishes == 0 {
		return
	}
	cur := ScoreSplit(c, *e, p)
	if e.ttftMissed(floor, min) && cur.TTFT > 0 && cur.TTFT < 1 {
		ttft = 1 / cur.TTFT
		e.ttftScale = ttft
	}
	if e.tpotMissed(floor, min) && cur.TPOT > 0 && cur.TPOT < 1 {
		tpot = 1 / cur.TPOT
		e.tpotScale = tpot
	}
	return
}

// arrivalSCV is c_a², the arrivals' squared coefficient of variation that
// the prefill wait is priced with: the long window's measured gap SCV when
// it exceeds Poisson's 1 by more than three standard errors (the sample SCV
// of n exponential gaps has a standard error of about sqrt(8/n)), else 1.
// Bursty arrivals (batches, gamma gaps of CV above 1) then price the queue
// their bursts build; Poisson noise does not.
func arrivalSCV(e DemandEstimate) float64 {
	if n := float64(e.LongArrivals); n > 2 && e.GapSCV > 1+3*math.Sqrt(8/n) {
		return e.GapSCV
	}
	return 1
}

// clumpSize is the mean size of the clumps bursty arrivals come in, read
// from their gap SCV c_a²: arrivals in Poisson batches of b have gap SCV
// 2b-1 (b-1 of every b gaps are 0, the other exponential with mean b/λ),
// so b = (c_a² + 1)/2; Poisson arrivals (c_a² = 1) come one at a time.
func clumpSize(ca2 float64) float64 { return math.Max(1, (ca2+1)/2) }

// waitProbability is the probability that an arrival waits in a pool of p
// prefill engines at utilisation rho, for arrivals of gap SCV ca2, given
// Erlang C's cw for Poisson arrivals: a clump of b arrivals finds about
// p(1-rho) engines free on average, and the members beyond them wait, so
// at least 1 - p(1-rho)/b of the arrivals wait, whatever Erlang C says.
// With Poisson arrivals it is Erlang C. Without it a bursty trace at a
// moderate mean load priced no wait at all (Erlang C under 1 - 0.9), and
// the controller stayed on a split whose TTFT the clumps broke for half an
// hour (issue 10, twelfth round).
func waitProbability(p int, rho, ca2, cw float64) float64 {
	if ca2 <= 1 {
		return cw
	}
	free := float64(p) * (1 - rho)
	return math.Max(cw, 1-math.Min(1, free/clumpSize(ca2)))
}

// robust reports whether split q scores better than split p at the
// offered prefill load one standard error below and above the estimate as
// well as at it, and at the decode work one relative standard error below
// and above (that of the rate of decode work measured on the requests
// that ended in the short window): a move whose gain reverses within the
// estimates' own noise (a burst's, or a short window's) is not made. The
// decode side matters past saturation, where the split with one decode
// engine fewer sits at its decode pool's saturation and its projection
// swings from a few times the TPOT SLO to fifty times between two passes
// (issue 10, fourth round).
func robust(c *View, e DemandEstimate, p, q int) bool {
	return robustWith(e, func(x DemandEstimate) bool { return ScoreSplit(c, x, q).Score() >= ScoreSplit(c, x, p).Score() }) == ""
}

// robustWith is robust's perturbation of e: it names the estimate ("the
// offered prefill load" or "the decode work") one standard error off
// which a move loses, "" when it loses at none.
func robustWith(e DemandEstimate, loses func(DemandEstimate) bool) string {
	for _, k := range [2]float64{-1, 1} {
		x := e
		x.PrefillLoad = math.Max(0, e.PrefillLoad+k*e.PrefillSE)
		if loses(x) {
			return "the offered prefill load"
		}
		if e.DecodeSteps > 0 {
			// With one request ended in the window the standard error is
			// the whole estimate, the lower scale 0, and 0 means unscaled:
			// that side is then checked at the estimate itself.
			x = e
			x.decodeScale = math.Max(0, 1+k*e.DecodeSE/e.DecodeSteps)
			if loses(x) {
				return "the decode work"
			}
		}
	}
	return ""
}

// erlangC is the probability that an arrival waits in an M/M/p queue
// offered a instance-seconds per second (a < p), by the Erlang B
// recursion, which stays stable for any p.
func erlangC(p int, a float64) float64 {
	if a <= 0 {
		return 0
	}
	b := 1.0
	for k := 1; k <= p; k++ {
		b = a * b / (float64(k) + a*b)
	}
	rho := a / float64(p)
	return b / (1 - rho*(1-b))
}

// Tick implements Controller.
func (a *Adaptive) Tick(c *View) bool {
	if c.now < a.next {
		return false
	}
	a.next = c.now + a.Cfg.Step
	if a.agg && a.hyb > 0 {
		// Hybrid serving was taken on one mix of prompts: a change of mix
		// takes the fleet back to the split it left, where the scoring
		// pass prices the new mix.
		e := a.estimate(c)
		if e.mixShift {
			a.hybMixPasses++
		} else {
			a.hybMixPasses = 0
		}
		// The change must show at Confirmations passes in a row: in mixed
		// traffic a clump of long prompts moves the quarter window's mean
		// prefill time for a pass or two, and leaving on it undid the
		// hybrid within a minute (issue 10, thirtieth round).
		if a.hybMixPasses >= a.Cfg.Confirmations {
			a.hybMixPasses = 0
			a.mixSeen, a.lastMix, a.mixFrom = true, c.now, c.now
			a.aggregate(c, -a.hyb, a.aggFrom, e, fmt.Sprintf("hybrid: a change of mix (mean prefill %.4f s now), back to %s",
				e.mixNow().mean, fleetName(a.aggFrom, len(c.inst))))
			a.byRehearsal = false
			return true
		}
	}
	if a.agg {
		// Aggregated serving: the projections price splits only, so the
		// rehearsal alone decides when to leave.
		a.rehearse(c)
		return true
	}
	p := c.Count(event.RolePrefill)
	a.pass(c)
	if c.Count(event.RolePrefill) == p {
		a.rehearse(c)
	}
	return true
}

// estimate is the pass's demand estimate now: the short window's, blended
// with the long window's when that is longer.
func (a *Adaptive) estimate(c *View) DemandEstimate {
	if a.Cfg.LongWindow > a.Cfg.Window {
		return a.demand.blend(c.now, a.Cfg.Window)
	}
	return a.demand.estimate(c.now, 0)
}

// pass is one scoring pass: it decides, records why, and may move one
// engine.
func (a *Adaptive) pass(c *View) {
	n := len(c.inst)
	p := c.Count(event.RolePrefill)
	e := a.estimate(c)
	rec := AdaptiveDecision{Controller: "adaptive", Split: splitName(p, n-p), Rate: Ratio(e.Rate),
		PrefillLoad: Ratio(e.PrefillLoad), DecodeSteps: Ratio(e.DecodeSteps), ShortWindow: e.ShortPrefill,
		Candidates: []SplitCandidate{}}
	scaled := ""
	decide := func(choice, why string) {
		rec.Choice, rec.Why = choice, why+scaled
		c.Decide(rec)
	}
	if e.Arrivals < a.Cfg.MinArrivals {
		a.proposal, a.confirms = 0, 0
		decide("stay", fmt.Sprintf("warm-up: %d arrivals in the window, need %d", e.Arrivals, a.Cfg.MinArrivals))
		return
	}
	if ca2 := arrivalSCV(e); ca2 > 1 && float64(e.LongArrivals)/clumpSize(ca2) < float64(a.Cfg.MinArrivals) {
		// Bursty arrivals carry less evidence per arrival: a clump is one
		// draw of the rate, so n arrivals in clumps of b (see clumpSize)
		// weigh about n/b independent ones (batches of 8: n/8). Until
		// the twelfth round this was n/c_a², twice as strict: on the
		// Azure code trace in batches of 8 it held 66-100% of the
		// passes in warm-up, and the fleet on a split failing TPOT.
		a.proposal, a.confirms = 0, 0
		decide("stay", fmt.Sprintf("warm-up: %d bursty arrivals (c_a² %.1f) weigh %.1f, need %d",
			e.LongArrivals, ca2, float64(e.LongArrivals)/clumpSize(ca2), a.Cfg.MinArrivals))
		return
	}
	if e.mixShift && (!a.mixSeen || c.now-a.lastMix > a.Cfg.Step) {
		// A change of mix begins: the window's endings are the old mix's,
		// whose misses say little of what this split delivers to the new
		// one (after the Azure code trace's change to conversation, its
		// TTFT misses held the fleet on a split that failed the
		// conversations' TPOT for ~100 s). The evidence restarts, as at a
		// move.
		a.mixFrom = c.now
		a.since.n, a.since.ttftOK, a.since.tpotOK = 0, 0, 0
	}
	if a.moved && c.now-a.lastMove < a.Cfg.LongWindow || a.mixFrom > 0 && c.now-a.mixFrom < a.Cfg.LongWindow {
		// Within the long window of a move, the window's endings mix the
		// split before it with the one after: only requests that arrived
		// after the move, served by this split alone, are evidence of
		// what it delivers (the check waits for MinArrivals of them).
		// Likewise within the long window of a change of mix.
		e.Finishes = a.since.n
		if n := a.since.n; n > 0 {
			e.TTFTOK, e.TPOTOK = float64(a.since.ttftOK)/float64(n), float64(a.since.tpotOK)/float64(n)
		}
	}
	if e.Finishes >= a.Cfg.MinArrivals {
		ts, ps := attainmentScales(c, &e, p, a.Cfg.Attainment, a.Cfg.MinArrivals)
		if ts != 1 || ps != 1 {
			scaled = fmt.Sprintf("; delivered attainment (ttft %.2f, tpot %.2f) scales projections ×%.2f ttft, ×%.2f tpot", e.TTFTOK, e.TPOTOK, ts, ps)
		}
	}
	cur := ScoreSplit(c, e, p)
	best, down := cur, cur // down: the neighbour toward decode, p-1
	for _, q := range candidateSplits(p, n) {
		s := ScoreSplit(c, e, q)
		if q == p-1 {
			down = s
		}
		rec.Candidates = append(rec.Candidates, SplitCandidate{P: q, TTFT: Ratio(s.TTFT), TPOT: Ratio(s.TPOT), Score: Ratio(s.Score())})
		if q < a.Cfg.MinPrefill || n-q < a.Cfg.MinDecode || q < 1 || q >= n {
			continue
		}
		if s.Score() < best.Score() {
			best = s
		}
	}
	a.mem.remember(c.now, e, a.Cfg.Memory)
	if e.mixShift {
		a.mixSeen, a.lastMix = true, c.now
	}
	// Not within the long window of a change of mix: a phase boundary is
	// not a burst, and the pool a phase starved may be the next one's.
	settled := !a.mixSeen || c.now-a.lastMix >= a.Cfg.LongWindow
	if a.Cfg.BurstZ > 0 && e.Rate > 0 && settled && cur.Score() < 1 && e.ttftScale == 0 && e.tpotScale == 0 {
		// Every SLO projected met, and delivered: insure against bursts.
		// A pass the insurance does not answer goes on to the score.
		why, done := a.insure(c, e, p, n, cur, decide)
		if done {
			return
		}
		scaled += "; no insurance: " + why
	}
	if settled && a.hybrid(c, e, p, cur, down, best, decide) {
		return
	}
	if best.Prefill == p {
		a.proposal, a.confirms = 0, 0
		decide("stay", fmt.Sprintf("current split scores best (%.3f)", cur.Score()))
		return
	}
	opening := a.openingMiss(c, e, p, cur, best)
	if opening != "" {
		scaled += "; opening split: " + opening
	}
	if e.PrefillSE > 0 && !robust(c, e, p, best.Prefill) {
		a.proposal, a.confirms = 0, 0
		decide("stay", fmt.Sprintf("best neighbour %dP improves %.3f -> %.3f, but not at the offered prefill load ± one standard error (%.3f ± %.3f)",
			best.Prefill, cur.Score(), best.Score(), e.PrefillLoad, e.PrefillSE))
		return
	}
	gain := cur.Score() - best.Score()
	margin, rel := a.Cfg.Margin, a.Cfg.RelMargin
	// A crossing takes the fleet from a split projected to break an SLO
	// (or, the opening's answer, one delivered missing it) to one
	// projected to meet both.
	crossing := (cur.Score() >= 1 || opening != "") && best.Score() < 1
	if ca2 := arrivalSCV(e); ca2 > 1 && opening == "" && !crossing {
		// Bursty arrivals: every projection is noisier by about c_a, and a
		// thin gain is as likely the last burst's as the traffic's, so
		// the margins widen with c_a. Poisson traffic keeps them; so does
		// the opening split's answer to a delivered miss (see
		// AdaptiveConfig.OpeningShare), and so does a crossing (issue 10,
		// twenty-eighth round: on steady in batches of 8 the fleet sat on
		// 3P5D, projected 1.01-1.06 and delivering a third of its
		// requests' TPOT, for a minute, while 2P6D projected 0.92-0.96:
		// a gain of 0.09 under the widened 0.10). The confirmations still
		// stand between a burst and a move.
		w := math.Min(math.Sqrt(ca2), 2)
		margin, rel = margin*w, rel*w
	}
	dir := best.Prefill - p
	reversal := a.moved && sign(dir) == -sign(a.lastDir) && c.now-a.lastMove < a.Cfg.ThrashWindow
	if reversal && best.Steady() >= 1 {
		if why := a.overloadReversal(c, e, dir); why != "" {
			a.proposal, a.confirms = 0, 0
			decide("stay", fmt.Sprintf("best neighbour %dP improves %.3f -> %.3f, but %s", best.Prefill, cur.Score(), best.Score(), why))
			return
		}
	}
	if reversal {
		margin, rel = 2*margin, 2*rel
	}
	// The relative margin keeps noise on a loaded fleet's steep scores from
	// moving engines; a move that brings a split breaking an SLO back under
	// it needs only the absolute margin, and so does one away from a split
	// that misses an SLO by both accounts, delivered and projected, toward
	// one that projects that SLO lower and the other unbroken (issue 10,
	// seventh round: the relative margin held a fleet on a split failing
	// every request's TPOT for five minutes).
	underRel := best.Score() > cur.Score()*(1-rel) // the gain is under the relative margin
	if !crossing && underRel && gain >= margin {
		if slo := a.confirmedMiss(e, cur, best); slo != "" {
			crossing = true
			scaled += "; relative margin waived: " + slo
		}
	}
	if gain < margin || (!crossing && underRel) {
		a.proposal, a.confirms = 0, 0
		decide("stay", fmt.Sprintf("best neighbour %dP improves %.3f -> %.3f, below the margins (%.2f, %.0f%%)",
			best.Prefill, cur.Score(), best.Score(), margin, 100*rel))
		return
	}
	if a.proposal != best.Prefill {
		a.proposal, a.confirms = best.Prefill, 0
	}
	a.confirms++
	target := fmt.Sprintf("%dP%dD", best.Prefill, n-best.Prefill)
	need := a.Cfg.Confirmations
	// A move the offered demand supports by the margins, or one answering
	// resident work that breaks an SLO now while the demand points the
	// same way (its window still mixes the old traffic with the new),
	// needs the usual confirmations, even when the demand projects an SLO
	// broken on the current split: that projection rests on a rate
	// estimate whose noise is largest exactly there, near saturation. A
	// move the demand does not support answers work resident now (a
	// burst's backlog): it must persist for TransientConfirmations.
	sg := cur.Steady() - best.Steady()
	demand := sg >= margin && best.Steady() <= cur.Steady()*(1-rel) // the demand supports it by the margins
	if !demand && !(sg > 0 && cur.Score() >= 1) && opening == "" {
		need = max(need, a.Cfg.TransientConfirmations)
	}
	if reversal && !(demand && cur.Steady() >= 1) {
		// Undoing the last move within the thrash window: the evidence
		// must persist as long as a transient's, so a burst that pushed
		// one way and passed does not pull the engine straight back;
		// unless the offered demand breaks an SLO on the current split
		// and the reversal answers it by the (doubled) margins, as after
		// a change of traffic the last move did not foresee.
		need = max(need, a.Cfg.TransientConfirmations)
	}
	if a.confirms < need {
		decide("propose "+target, fmt.Sprintf("score %.3f -> %.3f, confirmation %d of %d",
			cur.Score(), best.Score(), a.confirms, need))
		return
	}
	if a.moved && c.now-a.lastMove < a.Cfg.Evidence {
		decide("propose "+target, fmt.Sprintf("score %.3f -> %.3f, waiting for evidence of the last move", cur.Score(), best.Score()))
		return
	}
	if why := a.guard(c, p, best.Prefill); why != "" {
		// The rehearsal's guard holds a move undoing its own, unless the
		// split it chose misses an SLO as delivered and as projected: the
		// replay knows only the answers that ended, and a split whose
		// decode pool the long answers still running overwhelm is one it
		// cannot see failing (twenty-eighth round).
		slo := a.confirmedMiss(e, cur, best)
		if slo == "" {
			a.proposal, a.confirms = 0, 0
			decide("stay", fmt.Sprintf("best neighbour %dP improves %.3f -> %.3f, but %s", best.Prefill, cur.Score(), best.Score(), why))
			return
		}
		scaled += "; the rehearsal's guard yields: " + slo
	}
	a.move(c, p, best.Prefill, n, e, fmt.Sprintf("score %.3f -> %.3f (ttft %.3f, tpot %.3f)", cur.Score(), best.Score(), best.TTFT, best.TPOT), decide)
}

// hybrid is the scoring pass's move to hybrid serving (Hybrid; issue 10,
// twenty-ninth round), on one mix of prompts (the caller's settled), and
// reports whether the pass is done; lo is the pass's score of p-1. From p >= 2 prefill engines it
// proposes (p-1)P with the rest mixed when the current split is bound by
// TPOT, the neighbour toward decode breaks TTFT, and the hybrid, priced
// as (p-1)P's TPOT and pP's TTFT (its mixed engines taking the prompts
// one prefill engine fewer leaves waiting), projects under 1 and under
// every split, and under the current one by the plain margin. Three
// proposals in a row, then a replay of the window on both (Replayer,
// whether or not the fleet delivered the window) must not rate the hybrid
// worse: the projection counts no prompt on a mixed engine, and on
// chatdoc's documents those stall the streams (a replay rated 3P5M at
// half of 4P4D's window). Once a replay rated it worse, or the rehearsal
// took the fleet out of it, no hybrid is proposed until the mix changes.
// Without a rehearser the fleet never goes hybrid: nothing would take it
// out.
func (a *Adaptive) hybrid(c *View, e DemandEstimate, p int, cur, lo, best SplitScore, decide func(string, string)) bool {
	if a.hybRefuted && a.mixSeen && a.lastMix > a.hybLeft {
		a.hybRefuted = false
	}
	if p < 2 || a.Rehearser == nil || a.hybRefuted {
		return false
	}
	n := len(c.inst)
	h := math.Max(lo.TPOT, cur.TTFT)
	if cur.TPOT < cur.TTFT || lo.TTFT < 1 || cur.Score()-h < a.Cfg.Margin || h >= best.Score() || h >= 1 {
		a.hybConfirms = 0
		return false
	}
	if a.hybConfirms++; a.hybConfirms < a.Cfg.Confirmations {
		return false
	}
	a.hybConfirms = 0
	q := -(p - 1)
	var cq, r int
	var k []int
	if rp, ok := a.Rehearser.(Replayer); ok {
		cq, k, r = rp.Replay(c.now, p, []int{q})
	} else {
		cq, k, r = a.Rehearser.Qualified(c.now, 0, p, []int{q}, func(int) int { return 0 })
	}
	if len(k) == 1 && k[0] < cq {
		a.hybRefuted, a.hybLeft = true, c.now
		decide("stay", fmt.Sprintf("hybrid %s projected %.3f, but a replay of the window qualifies fewer of its %d requests on it (%d) than on %s (%d)",
			fleetName(q, n), h, r, k[0], splitName(p, n-p), cq))
		return true
	}
	a.aggregate(c, p, q, e, fmt.Sprintf("hybrid: %s projected %.3f (tpot of %dP, ttft of %dP), %s %.3f",
		fleetName(q, n), h, p-1, p, splitName(p, n-p), cur.Score()))
	return true
}

// overloadReversal is why a reversal of the last move within the thrash
// window, toward a split that cannot carry the offered demand either (its
// steady projection breaks an SLO), is not made ("" when it may be). Past
// saturation every split fails, and the projections of two failing
// neighbours swing with the work each passes on (a prefill-bound split
// ends fewer requests, so its decode work looks light): on chatdoc the
// fleet went back and forth every 10-40 s, a fifth to a third of its
// changes reversing within 60 s, for at most a few points of attainment
// (issue 10, tenth round). Such a reversal waits out the thrash window
// unless the traffic moved its way since the last move (longer prompts
// or more prefill load for a move toward prefill, shorter or less
// toward decode), as at a phase change, or after a move decided on a
// short window's lull that the next passes no longer see.
func (a *Adaptive) overloadReversal(c *View, e DemandEstimate, dir int) string {
	now := e.mixNow()
	if mixMoved(a.moveMix, now) && (now.mean > a.moveMix.mean) == (dir > 0) {
		return ""
	}
	// Or the offered prefill load the move was decided on has moved back
	// by more than three standard errors (a move made on a short window's
	// lull or burst, which the next passes no longer see).
	if d := e.PrefillLoad - a.moveLoad; d*float64(dir) > 3*math.Hypot(e.PrefillSE, a.moveSE) {
		return ""
	}
	return fmt.Sprintf("that reverses the move %.0f s ago into a split that cannot carry the offered demand either, and neither the mix nor the load has moved its way since (mean prefill %.4f s then, %.4f s now; prefill load %.3f ± %.3f then, %.3f ± %.3f now)",
		(c.now - a.lastMove).Seconds(), a.moveMix.mean, now.mean, a.moveLoad, a.moveSE, e.PrefillLoad, e.PrefillSE)
}

// move relabels engines so the fleet goes from p prefill engines to q,
// and records the decision.
func (a *Adaptive) move(c *View, p, q, n int, e DemandEstimate, why string, decide func(string, string)) {
	dir := q - p
	target := fmt.Sprintf("%dP%dD", q, n-q)
	to := event.RolePrefill
	if dir < 0 {
		to = event.RoleDecode
	}
	moved := 0
	for _, mover := range pickMovers(c, to, abs(dir)) {
		if c.Move(mover, to, c.now, event.CauseController, why) {
			moved++
		}
	}
	if moved == 0 {
		decide("stay", "no instance can move")
		return
	}
	a.proposal, a.confirms = 0, 0
	a.lastMove, a.lastDir, a.moved, a.byRehearsal = c.now, dir, true, false
	a.moveMix, a.moveLoad, a.moveSE = e.mixNow(), e.PrefillLoad, e.PrefillSE
	a.since.n, a.since.ttftOK, a.since.tpotOK = 0, 0, 0
	if moved < abs(dir) {
		// Some moves were refused (an engine down: View.lastOnline): the
		// decision names the split reached, not the one asked for.
		q = c.Count(event.RolePrefill)
		target = fmt.Sprintf("%dP%dD", q, n-q)
		why += fmt.Sprintf(" (%d of %d moves taken: the others would leave a phase with no engine up)", moved, abs(dir))
	}
	decide("move "+target, why)
}

// memory is what the burst insurance remembers of the last
// AdaptiveConfig.Memory: the long window's mix at each pass, and how many
// of the requests that ended missed each SLO.
type memory struct {
	mixes              []mixSample
	ends               []endSample
	ttftMiss, tpotMiss int // among ends
}

type mixSample struct {
	at                  event.Time
	mean, mean2, decode float64 // mean prefill time and its square per arrival, decode work per ended request
}

type endSample struct {
	at                 event.Time
	ttftMiss, tpotMiss bool
}

// remember records the long window's mix at a pass and forgets what is
// older than span.
func (m *memory) remember(now event.Time, e DemandEstimate, span event.Time) {
	if span <= 0 {
		return
	}
	m.mixes = append(m.mixes, mixSample{now, e.longMean, e.longMean2, e.longDecode})
	k := 0
	for k < len(m.mixes) && now-m.mixes[k].at > span {
		k++
	}
	m.mixes = m.mixes[k:]
	m.forget(now, span)
}

// ended records a request's misses.
func (m *memory) ended(now event.Time, ttftMiss, tpotMiss bool) {
	m.ends = append(m.ends, endSample{now, ttftMiss, tpotMiss})
	if ttftMiss {
		m.ttftMiss++
	}
	if tpotMiss {
		m.tpotMiss++
	}
}

func (m *memory) forget(now, span event.Time) {
	k := 0
	for ; k < len(m.ends) && now-m.ends[k].at > span; k++ {
		if m.ends[k].ttftMiss {
			m.ttftMiss--
		}
		if m.ends[k].tpotMiss {
			m.tpotMiss--
		}
	}
	m.ends = m.ends[k:]
}

// sides is the misses remembered of the pool that receives an engine on
// a move in direction dir (above 0: toward prefill, whose SLO is TTFT) and
// of the pool that gives it up.
func (m *memory) sides(dir int) (take, give int) {
	if dir > 0 {
		return m.ttftMiss, m.tpotMiss
	}
	return m.tpotMiss, m.ttftMiss
}

// envelope is e with the heaviest mix remembered on each side: the
// largest mean prefill time (and square) per arrival and the largest
// decode work per request, at e's arrival rate (at least e's own load).
func (m *memory) envelope(e DemandEstimate) DemandEstimate {
	x := e
	for _, s := range m.mixes {
		x.MeanPrefill, x.MeanPrefill2 = math.Max(x.MeanPrefill, s.mean), math.Max(x.MeanPrefill2, s.mean2)
		x.DecodeSteps = math.Max(x.DecodeSteps, e.Rate*s.decode)
	}
	x.PrefillLoad = math.Max(e.PrefillLoad, e.Rate*x.MeanPrefill)
	return x
}

// needed is the headroom a burst calls for: 1 + z·c_a/sqrt(rate·horizon),
// the load of the busiest horizon z standard deviations above the mean
// (arrivals with index of dispersion c_a² over horizon seconds count
// rate·horizon on average with variance c_a²·rate·horizon).
func (a *Adaptive) needed(e DemandEstimate) float64 {
	return 1 + a.Cfg.BurstZ*math.Sqrt(arrivalSCV(e)/(e.Rate*a.Cfg.BurstHorizon.Seconds()))
}

// insure decides among splits that all meet both SLOs at the offered load
// (issue 10, ninth round). The score's margins keep such a fleet where it
// is, but the splits differ in the burst they ride: the current split
// stays when its headroom is the burst's (needed), and otherwise the
// neighbour with the most headroom, up to that, is proposed when
//   - the side giving the engine up missed its SLO no more often than
//     the side receiving it, over the memory (an engine is not taken
//     from a pool seen to miss more; on a tie, none at all included,
//     the headroom decides: issue 10, fortieth round, where holding back
//     on a 0-0 tie left a thin decode pool for a burst to break);
//   - under the envelope of the remembered mixes the neighbour has at
//     least the current split's headroom (an engine is not given away
//     from a side a recent phase needed);
//   - the gain holds at the offered prefill load and decode work ± one
//     standard error, as a scored move's must (robust);
//   - it reaches the needed headroom or improves on the current one by the
//     relative margin (widened for bursts, doubled for a reversal);
//
// and then the confirmations and the evidence wait apply as for any move.
// It reports whether it decided the pass (a proposal or a move); when it
// did not, it says why, and the pass goes on to the score, so the
// insurance only adds moves to those the score makes.
func (a *Adaptive) insure(c *View, e DemandEstimate, p, n int, cur SplitScore, decide func(string, string)) (string, bool) {
	lim := a.needed(e)
	hc := Headroom(c, e, p, lim)
	bh, bp := hc, p
	for _, q := range candidateSplits(p, n) {
		if q < a.Cfg.MinPrefill || n-q < a.Cfg.MinDecode || q < 1 || q >= n || q == p {
			continue
		}
		if h := Headroom(c, e, q, lim); h > bh {
			bh, bp = h, q
		}
	}
	if bp == p {
		return fmt.Sprintf("current split has the most headroom (%.2fx the load, %.2fx needed)", hc, lim), false
	}
	gain := fmt.Sprintf("neighbour %dP has more headroom (%.2fx -> %.2fx the load, %.2fx needed)", bp, hc, bh, lim)
	take, give := a.mem.sides(bp - p)
	if give > take {
		return fmt.Sprintf("%s, but the side giving the engine up missed more often in the last %.0f s (%d > %d)",
			gain, a.Cfg.Memory.Seconds(), give, take), false
	}
	env := a.mem.envelope(e)
	if hb, hp := Headroom(c, env, bp, lim), Headroom(c, env, p, lim); hb < hp {
		return fmt.Sprintf("%s, but less under the remembered mixes' envelope (%.2fx < %.2fx)", gain, hb, hp), false
	}
	if e.PrefillSE > 0 {
		if side := robustWith(e, func(x DemandEstimate) bool { return Headroom(c, x, bp, 2*lim) <= Headroom(c, x, p, 2*lim) }); side != "" {
			return gain + ", but not at " + side + " ± one standard error", false
		}
	}
	rel := a.Cfg.RelMargin
	if ca2 := arrivalSCV(e); ca2 > 1 {
		rel *= math.Min(math.Sqrt(ca2), 2)
	}
	dir := bp - p
	reversal := a.moved && sign(dir) == -sign(a.lastDir) && c.now-a.lastMove < a.Cfg.ThrashWindow
	if reversal {
		rel *= 2
	}
	if bh < math.Min(lim, hc*(1+rel)) {
		return fmt.Sprintf("%s, below the margin (%.0f%%)", gain, 100*rel), false
	}
	if a.proposal != bp {
		a.proposal, a.confirms = bp, 0
	}
	a.confirms++
	target := fmt.Sprintf("%dP%dD", bp, n-bp)
	need := a.Cfg.Confirmations
	if reversal {
		need = max(need, a.Cfg.TransientConfirmations)
	}
	if a.confirms < need {
		decide("propose "+target, fmt.Sprintf("insurance: headroom %.2fx -> %.2fx, confirmation %d of %d", hc, bh, a.confirms, need))
		return "", true
	}
	if a.moved && c.now-a.lastMove < a.Cfg.Evidence {
		decide("propose "+target, fmt.Sprintf("insurance: headroom %.2fx -> %.2fx, waiting for evidence of the last move", hc, bh))
		return "", true
	}
	if why := a.guard(c, p, bp); why != "" {
		a.proposal, a.confirms = 0, 0
		decide("stay", fmt.Sprintf("insurance: headroom %.2fx -> %.2fx, but %s", hc, bh, why))
		return "", true
	}
	a.move(c, p, bp, n, e, fmt.Sprintf("insurance: headroom %.2fx -> %.2fx the load (%.2fx needed; score %.3f); misses in the last %.0f s: %d ttft, %d tpot",
		hc, bh, lim, cur.Score(), a.Cfg.Memory.Seconds(), a.mem.ttftMiss, a.mem.tpotMiss), decide)
	return "", true
}

// confirmedMiss names the SLO (with its delivered attainment and projected
// ratio; "" for none) when the current split misses it by both
// accounts (fewer than Attainment of the requests the check counts met it,
// and its projection is at least 1) while split best projects that SLO
// lower and the other one under 1. The delivered side is the check's
// count (since the last move, within LongWindow of it), and it needs
// MinArrivals endings, as the check does.
func (a *Adaptive) confirmedMiss(e DemandEstimate, cur, best SplitScore) string {
	if e.Finishes < a.Cfg.MinArrivals || a.Cfg.Attainment <= 0 {
		return ""
	}
	if e.tpotMissed(a.Cfg.Attainment, a.Cfg.MinArrivals) && cur.TPOT >= 1 && best.TPOT < cur.TPOT && best.TTFT < 1 {
		return fmt.Sprintf("tpot missed as delivered (%.2f) and projected (%.2f)", e.TPOTOK, cur.TPOT)
	}
	if e.ttftMissed(a.Cfg.Attainment, a.Cfg.MinArrivals) && cur.TTFT >= 1 && best.TTFT < cur.TTFT && best.TPOT < 1 {
		return fmt.Sprintf("ttft missed as delivered (%.2f) and projected (%.2f)", e.TTFTOK, cur.TTFT)
	}
	return ""
}

// openingMiss names the SLO (with its delivered attainment and the
// remembered misses of each; "" for none) when the move from p to best is
// the opening split's answer to a delivered miss (see
// AdaptiveConfig.OpeningShare): the fleet has not moved yet from a split
// the controller opened on (not one resumed from a leader), fewer than
// Attainment of the check's ten or more endings met that SLO, its misses
// over Memory outnumber the other's more than OpeningShare to one, and
// best adds an engine to its pool, projects it lower and the other SLO
// under 1.
func (a *Adaptive) openingMiss(c *View, e DemandEstimate, p int, cur, best SplitScore) string {
	k := a.Cfg.OpeningShare
	if k <= 0 || a.moved || c.resumed || a.Cfg.Attainment <= 0 || e.Finishes < a.Cfg.MinArrivals {
		return ""
	}
	take, give := a.mem.sides(best.Prefill - p)
	if float64(take) <= k*float64(give) {
		return ""
	}
	switch {
	case best.Prefill > p && e.ttftMissed(a.Cfg.Attainment, a.Cfg.MinArrivals) && best.TTFT < cur.TTFT && best.TPOT < 1:
		return fmt.Sprintf("ttft met by %.2f of the ended requests; misses in the last %.0f s: %d ttft, %d tpot",
			e.TTFTOK, a.Cfg.Memory.Seconds(), take, give)
	case best.Prefill < p && e.tpotMissed(a.Cfg.Attainment, a.Cfg.MinArrivals) && best.TPOT < cur.TPOT && best.TTFT < 1:
		return fmt.Sprintf("tpot met by %.2f of the ended requests; misses in the last %.0f s: %d tpot, %d ttft",
			e.TPOTOK, a.Cfg.Memory.Seconds(), take, give)
	}
	return ""
}

// candidateSplits are the prefill pool sizes a pass scores: the
// neighbours p-1 and p+1 (Arrow's one-engine steps) and, on fleets large
// enough that one engine is a small share, steps of 2, 4, 8, ... engines
// up to a sixteenth of the fleet, so a large fleet can follow a change of
// traffic within a few passes. A fleet under 32 engines scores only the
// neighbours.
func candidateSplits(p, n int) []int {
	out := []int{p - 1, p, p + 1}
	for k := 2; k <= n/16; k *= 2 {
		out = append(out, p-k, p+k)
	}
	return out
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

func abs(x int) int { return max(x, -x) }

// pickMover chooses the instance to relabel toward role to: among the
// online, unpinned instances of the other role, one still holding work of the target
// phase first (its previous move is incomplete), then the one with the
// least resident work of its current phase (Arrow §5.5's flip order).
func pickMover(c *View, to event.Role) event.Instance {
	from := moverFrom(to)
	best := event.NoInstance
	var bestCost Cost
	for i := range c.inst {
		in := &c.inst[i]
		if in.Role != from || !in.Online(c.now) || in.Pinned {
			continue
		}
		k := moverCost(in, from)
		if best == event.NoInstance || k.Less(bestCost) {
			best, bestCost = event.Instance(i), k
		}
	}
	return best
}

// moverFrom is the role an instance moving toward to leaves.
func moverFrom(to event.Role) event.Role {
	if to == event.RolePrefill {
		return event.RoleDecode
	}
	return event.RolePrefill
}

// moverCost is pickMover's order: work of the target phase first, then
// the resident work of the current one.
func moverCost(in *Instance, from event.Role) Cost {
	var k Cost
	if from == event.RolePrefill {
		k = Cost{1, in.PrefillWork}
		if in.DecodeCount > 0 {
			k[0] = 0
		}
	} else {
		k = Cost{1, float64(in.DecodeTokens)}
		if in.PrefillCount > 0 {
			k[0] = 0
		}
	}
	return k
}

// pickMovers returns the up to n instances that n rounds of pickMover, each
// followed by the move, would choose, in that order, in one pass over the
// fleet and a sort: a move changes only the moved instance (its role), so
// the rounds take the eligible instances in order of cost, lowest index
// first among equals (costs are finite: profiles are validated).
func pickMovers(c *View, to event.Role, n int) []event.Instance {
	if n <= 1 {
		if m := pickMover(c, to); m != event.NoInstance && n == 1 {
			return []event.Instance{m}
		}
		return nil
	}
	from := moverFrom(to)
	out := inCostOrder(c, from, func(in *Instance) (Cost, bool) { return moverCost(in, from), in.Online(c.now) })
	return out[:min(n, len(out))]
}

// inCostOrder returns the unpinned instances in role from that cost
// admits, in order of their cost, lowest index first among equals.
func inCostOrder(c *View, from event.Role, cost func(in *Instance) (Cost, bool)) []event.Instance {
	type candidate struct {
		i event.Instance
		k Cost
	}
	var cs []candidate
	for i := range c.inst {
		in := &c.inst[i]
		if in.Role != from || in.Pinned {
			continue
		}
		if k, ok := cost(in); ok {
			cs = append(cs, candidate{event.Instance(i), k})
		}
	}
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].k.Less(cs[b].k) })
	out := make([]event.Instance, len(cs))
	for j, x := range cs {
		out[j] = x.i
	}
	return out
}
