package traces

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Stream constants name the independent random streams of a phase. Each
// phase p of a run with seed s draws from rand.NewPCG(streamSeeds(s, k, p))
// for k in these constants, so one phase's draws never depend on how many
// draws another phase made.
const (
	streamArrival uint64 = 0x6172726976616c31 // "arrival1": gaps of the unit-rate process
	streamClass   uint64 = 0x636c617373657331 // "classes1": class choice and counts shuffles
	streamLength  uint64 = 0x6c656e6774687331 // "lengths1": input/output lengths and prefix group choice
	streamPrefix  uint64 = 0x7072656669787331 // "prefixs1": per-group prefix lengths (phase-independent)
	streamBatch   uint64 = 0x6261746368657331 // "batches1": batch sizes of batched arrivals (whole trace)
)

// batchArrivals groups consecutive requests into batches sent at the same
// instant (the first request's time): batch sizes are geometric with mean
// m >= 1, drawn from the seed's batch stream. Counts and order are kept.
func batchArrivals(reqs []Request, seed uint64, m float64) {
	b := newBatcher(seed, m)
	for i := range reqs {
		b.apply(&reqs[i])
	}
}

// batcher groups a stream of requests into batches as batchArrivals does,
// one request at a time.
type batcher struct {
	r        *rand.Rand // nil: no batching
	q        float64    // 1 - 1/mean
	i        int        // index of the next request
	next     int        // index of the next batch's first request
	end      int        // requests before end belong to the current batch
	leaderAt event.Time // when the current batch is sent
}

func newBatcher(seed uint64, m float64) batcher {
	if !(m > 1) {
		return batcher{}
	}
	return batcher{r: rand.New(newStream(seed, streamBatch, 0)), q: 1 - 1/m}
}

// apply gives the next request its batch's time.
func (b *batcher) apply(req *Request) {
	if b.r == nil {
		return
	}
	switch i := b.i; {
	case i == b.next:
		k := 1 + int(math.Floor(math.Log(1-b.r.Float64())/math.Log(b.q)))
		b.leaderAt, b.end, b.next = req.At, i+k, i+max(k, 1)
	case i < b.end:
		req.At = b.leaderAt
	}
	b.i++
}

// mix64 is the SplitMix64 finaliser; it spreads nearby inputs apart.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func streamSeeds(seed, stream, index uint64) (uint64, uint64) {
	a := mix64(seed ^ mix64(stream))
	return a, mix64(a ^ mix64(stream+index+1))
}

func newStream(seed, stream, index uint64) *rand.PCG {
	return rand.NewPCG(streamSeeds(seed, stream, index))
}

// Generate returns the trace's requests for the given seed, sorted by At.
// scale multiplies the rate of every phase (a requests phase gets
// round(N*scale) arrivals, a counts phase round(N*scale) per class); phase
// durations never change. The same spec, seed and scale always give the
// same slice: the requests Stream hands out one at a time.
func (s *Spec) Generate(seed uint64, scale float64) ([]Request, error) {
	g, err := s.newGenerator(seed, scale, MaxRequests)
	if err != nil {
		return nil, err
	}
	expected := s.ExpectedRequests(scale)
	out := make([]Request, 0, int(expected+4*math.Sqrt(expected)+16))
	var r Request
	for g.next(&r) {
		out = append(out, r)
	}
	if g.err != nil {
		return nil, g.err
	}
	return out, nil
}

// Stream returns the trace's requests for the given seed and scale one at
// a time, in the order Generate returns them and equal to them, holding
// only the generator's state (one phase's class order for a counts
// phase), never the trace. A stream may hold up to MaxStreamRequests
// requests.
func (s *Spec) Stream(seed uint64, scale float64) (*Stream, error) {
	g, err := s.newGenerator(seed, scale, MaxStreamRequests)
	if err != nil {
		return nil, err
	}
	return &Stream{gen: g}, nil
}

// newGenerator checks the spec and scale and prepares a generator that
// fails once it has produced more than limit requests.
func (s *Spec) newGenerator(seed uint64, scale float64, limit int) (*generator, error) {
	if !(scale > 0) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("trace %s: scale %s: expected a finite number > 0", s.Name, formatFloat(scale))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	expected := s.ExpectedRequests(scale)
	if !(expected <= float64(limit)) {
		return nil, fmt.Errorf("trace %s: about %.4g requests expected at scale %s: expected at most %d",
			s.Name, expected, formatFloat(scale), limit)
	}
	g := &generator{
		spec:    s,
		seed:    seed,
		scale:   scale,
		limit:   limit,
		names:   s.classNames(),
		prefixN: make(map[int64]int),
		phaseI:  -1,
		batch:   newBatcher(seed, s.Arrival.BatchMean),
	}
	g.classes = make([]classSampler, len(g.names))
	for i, name := range g.names {
		g.classes[i] = newClassSampler(s.Classes[name])
	}
	return g, nil
}

// Phase kinds of the generator.
const (
	phaseIdle  = iota // no arrivals (and before the first phase)
	phaseRate         // a rate or rate_multiplier phase: arrivals until the phase ends
	phaseFixed        // a requests or counts phase: exactly left more arrivals
)

// generator produces a spec's requests lazily, phase by phase; next hands
// out one request at a time. Each phase draws from its own streams, so
// the requests are the same however they are consumed.
type generator struct {
	spec    *Spec
	seed    uint64
	scale   float64
	limit   int      // more requests than this is an error
	names   []string // sorted class names; a class's index is its position
	classes []classSampler
	prefixN map[int64]int // prefix length of each group seen so far
	batch   batcher
	n       int   // requests produced
	err     error // why next stopped early

	// the phase being generated
	phaseI    int // its index; -1 before the first
	start     event.Time
	kind      int
	arr       *arrivals
	classRNG  *rand.Rand
	lengthRNG *rand.Rand
	durNs     float64
	pick      classPicker
	seq       []int32 // counts phase: the shuffled class of each arrival
	k         int     // arrivals of the phase so far
	left      int     // fixed phase: arrivals still to come
	total     float64 // fixed phase: the sum of its n+1 unit gaps
	sum       float64 // unit-rate time so far
	nsPerUnit float64 // rate phase: ns per unit of the unit-rate process
}

// next stores the next request in r, or reports false at the end of the
// trace or on an error (g.err).
func (g *generator) next(r *Request) bool {
	if g.err != nil {
		return false
	}
	for {
		switch g.kind {
		case phaseFixed:
			if g.left > 0 {
				g.left--
				g.sum += g.arr.gap()
				off := 0.0
				if g.total > 0 {
					off = g.durNs * (g.sum / g.total)
				}
				ci := 0
				if g.seq != nil {
					ci = int(g.seq[g.k])
				} else {
					ci = g.pick.pick(g.classRNG)
				}
				g.emit(r, min(off, g.durNs-1), ci)
				return true
			}
		case phaseRate:
			g.sum += g.arr.gap()
			off := math.Round(g.sum * g.nsPerUnit)
			if off < g.durNs {
				g.emit(r, off, g.pick.pick(g.classRNG))
				if g.n > g.limit {
					g.err = fmt.Errorf("trace %s: phases[%d] produced more than %d requests", g.spec.Name, g.phaseI, g.limit)
					return false
				}
				return true
			}
			// This draw crosses the phase end: discard it.
		}
		if !g.nextPhase() {
			return false
		}
	}
}

// nextPhase prepares the phase after the current one, or reports false
// when there is none.
func (g *generator) nextPhase() bool {
	if g.phaseI >= len(g.spec.Phases) {
		return false
	}
	if g.phaseI >= 0 {
		g.start += event.Time(g.spec.Phases[g.phaseI].Duration)
	}
	g.phaseI++
	if g.phaseI >= len(g.spec.Phases) {
		g.kind, g.seq = phaseIdle, nil
		return false
	}
	i := g.phaseI
	p := &g.spec.Phases[i]
	idx := uint64(i)
	g.arr = newArrivals(g.spec.arrivalOf(i), newStream(g.seed, streamArrival, idx))
	g.classRNG = rand.New(newStream(g.seed, streamClass, idx))
	g.lengthRNG = rand.New(newStream(g.seed, streamLength, idx))
	g.durNs = float64(time.Duration(p.Duration).Nanoseconds())
	g.k, g.sum, g.seq = 0, 0, nil
	switch {
	case p.Counts != nil:
		// Exactly round(N*scale) requests of each class, in an order
		// shuffled by the class stream, at the times of a requests phase.
		var seq []int32
		for ci, name := range g.names {
			n := int(math.Round(float64(p.Counts[name]) * g.scale))
			for range n {
				seq = append(seq, int32(ci))
			}
		}
		g.classRNG.Shuffle(len(seq), func(a, b int) { seq[a], seq[b] = seq[b], seq[a] })
		g.seq = seq
		g.fixed(len(seq))
	case p.Requests != nil:
		g.pick = newClassPicker(g.names, p.Mix)
		g.fixed(int(math.Round(float64(*p.Requests) * g.scale)))
	default:
		rate := g.spec.phaseRate(i) * g.scale
		g.kind = phaseIdle
		if rate > 0 {
			g.kind = phaseRate
			g.pick = newClassPicker(g.names, p.Mix)
			g.nsPerUnit = 1e9 / rate
		}
	}
	return true
}

// fixed prepares exactly n arrivals within the phase: n+1 unit gaps are
// drawn and scaled to sum to the phase's duration, and the first n
// partial sums are the arrival offsets (the same gaps are drawn again as
// the arrivals are handed out). For the uniform process this spaces
// arrivals evenly at duration*k/(n+1).
func (g *generator) fixed(n int) {
	g.kind, g.left, g.total = phaseFixed, max(n, 0), 0
	if n <= 0 {
		return
	}
	saved := *g.arr.pcg
	for range n + 1 {
		g.total += g.arr.gap()
	}
	*g.arr.pcg = saved // replay the same gaps
}

// emit stores request k of the phase, of class ci at offset off (ns) after
// the phase's start, in req.
func (g *generator) emit(req *Request, off float64, ci int) {
	c := &g.classes[ci]
	r := g.lengthRNG
	*req = Request{
		At:           g.start + event.Time(math.Round(off)),
		Class:        g.names[ci],
		InputTokens:  c.input.sample(r),
		OutputTokens: c.output.sample(r),
		OutputCap:    c.outputCap,
	}
	if c.groups > 0 {
		gi := int64(r.IntN(c.groups))
		if c.perPhase {
			gi += int64(g.phaseI) * int64(c.groups)
		}
		id := int64(ci)<<32 | (gi + 1)
		n, ok := g.prefixN[id]
		if !ok {
			n = c.prefix.sample(rand.New(newStream(g.seed, streamPrefix, uint64(id))))
			g.prefixN[id] = n
		}
		req.PrefixGroup = id
		req.PrefixTokens = min(n, req.InputTokens)
	}
	g.k++
	g.n++
	g.batch.apply(req)
}

// classPicker draws a class index with the weights of a phase mix.
type classPicker struct {
	cum   []float64 // cumulative weight per class index
	total float64
}

func newClassPicker(names []string, mix map[string]float64) classPicker {
	cp := classPicker{cum: make([]float64, len(names))}
	for i, name := range names {
		cp.total += mix[name]
		cp.cum[i] = cp.total
	}
	return cp
}

func (cp classPicker) pick(r *rand.Rand) int {
	u := r.Float64() * cp.total
	for i, c := range cp.cum {
		if u < c {
			return i
		}
	}
	// u rounded up to total: the last class with a positive weight.
	for i := len(cp.cum) - 1; i > 0; i-- {
		if cp.cum[i] > cp.cum[i-1] {
			return i
		}
	}
	return 0
}

// classSampler holds a class's prepared distributions.
type classSampler struct {
	input, output, prefix lengthSampler
	outputCap             int
	groups                int  // 0 = no prefix groups
	perPhase              bool // groups are drawn per phase
}

func newClassSampler(c Class) classSampler {
	cs := classSampler{
		input:     newLengthSampler(c.Input),
		output:    newLengthSampler(c.Output),
		outputCap: c.OutputCap,
	}
	if c.Prefix != nil {
		cs.groups = c.Prefix.Groups
		cs.perPhase = c.Prefix.Scope == "phase"
		cs.prefix = newLengthSampler(c.Prefix.Tokens)
	}
	return cs
}

// lengthSampler draws token lengths from a validated Dist.
type lengthSampler struct {
	kind     string
	lo, hi   int     // bounds (uniform, normal, lognormal); value for fixed in lo
	mu, sd   float64 // normal: mean, stddev; lognormal: log median, sigma
	values   []int   // empirical
	cum      []float64
	totalCum float64
}

func newLengthSampler(d Dist) lengthSampler {
	ls := lengthSampler{kind: d.Kind, lo: 1}
	if d.Min != nil {
		ls.lo = *d.Min
	}
	if d.Max != nil {
		ls.hi = *d.Max
	}
	switch d.Kind {
	case DistFixed:
		ls.lo = *d.Value
	case DistNormal:
		ls.mu, ls.sd = *d.Mean, *d.Stddev
	case DistLognormal:
		ls.mu, ls.sd = math.Log(*d.Median), *d.Sigma
	case DistEmpirical:
		ls.values = d.Values
		if d.Weights != nil {
			ls.cum = make([]float64, len(d.Weights))
			for i, w := range d.Weights {
				ls.totalCum += w
				ls.cum[i] = ls.totalCum
			}
		}
	}
	return ls
}

func (ls *lengthSampler) sample(r *rand.Rand) int {
	switch ls.kind {
	case DistFixed:
		return ls.lo
	case DistUniform:
		return ls.lo + r.IntN(ls.hi-ls.lo+1)
	case DistNormal:
		return ls.clip(ls.mu + ls.sd*r.NormFloat64())
	case DistLognormal:
		return ls.clip(math.Exp(ls.mu + ls.sd*r.NormFloat64()))
	case DistEmpirical:
		if ls.cum == nil {
			return ls.values[r.IntN(len(ls.values))]
		}
		u := r.Float64() * ls.totalCum
		i, _ := slices.BinarySearchFunc(ls.cum, u, func(c, u float64) int {
			if c <= u {
				return -1
			}
			return 1
		})
		// i is the first index whose cumulative weight exceeds u; rounding
		// can leave it past the end or on a zero-weight value.
		if i >= len(ls.values) {
			i = len(ls.values) - 1
		}
		for i > 0 && ls.cum[i] == ls.cum[i-1] {
			i--
		}
		return ls.values[i]
	}
	panic("traces: unvalidated distribution " + ls.kind)
}

// clip rounds x to the nearest integer within [lo, hi].
func (ls *lengthSampler) clip(x float64) int {
	x = math.Round(x)
	switch {
	case math.IsNaN(x) || x < float64(ls.lo):
		return ls.lo
	case x > float64(ls.hi):
		return ls.hi
	}
	return int(x)
}

// arrivals draws gaps of a unit-rate process (mean gap 1).
type arrivals struct {
	process string
	pcg     *rand.PCG
	r       *rand.Rand
	k       float64 // gamma shape
	d, c    float64 // Marsaglia–Tsang constants for shape max(k, k+1)
}

func newArrivals(a Arrival, pcg *rand.PCG) *arrivals {
	ar := &arrivals{process: orDefault(a.Process, ProcessPoisson), pcg: pcg, r: rand.New(pcg), k: a.shape()}
	if ar.process == ProcessGamma {
		shape := ar.k
		if shape < 1 {
			shape++
		}
		ar.d = shape - 1.0/3
		ar.c = 1 / math.Sqrt(9*ar.d)
	}
	return ar
}

// gap returns the next unit-rate gap.
func (a *arrivals) gap() float64 {
	switch a.process {
	case ProcessUniform:
		return 1
	case ProcessGamma:
		return a.gamma() / a.k
	}
	return a.r.ExpFloat64()
}

// gamma draws Gamma(k, 1) by Marsaglia and Tsang's method; for k < 1 it
// draws Gamma(k+1, 1) and multiplies by U^(1/k).
func (a *arrivals) gamma() float64 {
	var x float64
	for {
		z := a.r.NormFloat64()
		v := 1 + a.c*z
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := a.r.Float64()
		z2 := z * z
		if u < 1-0.0331*z2*z2 || math.Log(u) < 0.5*z2+a.d*(1-v+math.Log(v)) {
			x = a.d * v
			break
		}
	}
	if a.k < 1 {
		// 1-Float64() lies in (0, 1], so the power is finite.
		x *= math.Pow(1-a.r.Float64(), 1/a.k)
	}
	return x
}
