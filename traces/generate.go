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
	if !(m > 1) {
		return
	}
	r := rand.New(newStream(seed, streamBatch, 0))
	q := 1 - 1/m
	for i := 0; i < len(reqs); {
		k := 1 + int(math.Floor(math.Log(1-r.Float64())/math.Log(q)))
		for j := i + 1; j < i+k && j < len(reqs); j++ {
			reqs[j].At = reqs[i].At
		}
		i += max(k, 1)
	}
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
// same slice.
func (s *Spec) Generate(seed uint64, scale float64) ([]Request, error) {
	if !(scale > 0) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("trace %s: scale %s: expected a finite number > 0", s.Name, formatFloat(scale))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	expected := s.ExpectedRequests(scale)
	if !(expected <= MaxRequests) {
		return nil, fmt.Errorf("trace %s: about %.4g requests expected at scale %s: expected at most %d",
			s.Name, expected, formatFloat(scale), MaxRequests)
	}
	g := &generator{
		spec:    s,
		seed:    seed,
		scale:   scale,
		names:   s.classNames(),
		out:     make([]Request, 0, int(expected+4*math.Sqrt(expected)+16)),
		prefixN: make(map[int64]int),
	}
	g.classes = make([]classSampler, len(g.names))
	for i, name := range g.names {
		g.classes[i] = newClassSampler(s.Classes[name])
	}
	var start event.Time
	for i := range s.Phases {
		if err := g.phase(i, start); err != nil {
			return nil, err
		}
		start += event.Time(s.Phases[i].Duration)
	}
	batchArrivals(g.out, seed, s.Arrival.BatchMean)
	return g.out, nil
}

type generator struct {
	spec    *Spec
	seed    uint64
	scale   float64
	names   []string // sorted class names; a class's index is its position
	classes []classSampler
	out     []Request
	prefixN map[int64]int // prefix length of each group seen so far
	phaseI  int           // index of the phase being generated
}

// phase appends the arrivals of phase i, which starts at start.
func (g *generator) phase(i int, start event.Time) error {
	p := &g.spec.Phases[i]
	g.phaseI = i
	idx := uint64(i)
	arr := newArrivals(g.spec.arrivalOf(i), newStream(g.seed, streamArrival, idx))
	classRNG := rand.New(newStream(g.seed, streamClass, idx))
	lengthRNG := rand.New(newStream(g.seed, streamLength, idx))
	durNs := float64(time.Duration(p.Duration).Nanoseconds())
	first := len(g.out)

	switch {
	case p.Counts != nil:
		// Exactly round(N*scale) requests of each class, in an order
		// shuffled by the class stream, at the times of a requests phase.
		var seq []int
		for ci, name := range g.names {
			n := int(math.Round(float64(p.Counts[name]) * g.scale))
			for range n {
				seq = append(seq, ci)
			}
		}
		classRNG.Shuffle(len(seq), func(a, b int) { seq[a], seq[b] = seq[b], seq[a] })
		arr.fixedCount(len(seq), durNs, func(off float64) {
			g.emit(start, off, seq[len(g.out)-first], lengthRNG)
		})
	case p.Requests != nil:
		n := int(math.Round(float64(*p.Requests) * g.scale))
		pick := newClassPicker(g.names, p.Mix)
		arr.fixedCount(n, durNs, func(off float64) {
			g.emit(start, off, pick.pick(classRNG), lengthRNG)
		})
	default:
		rate := g.spec.phaseRate(i) * g.scale
		if rate <= 0 {
			return nil
		}
		pick := newClassPicker(g.names, p.Mix)
		nsPerUnit := 1e9 / rate
		sum := 0.0
		for {
			sum += arr.gap()
			off := math.Round(sum * nsPerUnit)
			if !(off < durNs) {
				break // this draw crosses the phase end: discard it
			}
			g.emit(start, off, pick.pick(classRNG), lengthRNG)
			if len(g.out) > MaxRequests {
				return fmt.Errorf("trace %s: phases[%d] produced more than %d requests", g.spec.Name, i, MaxRequests)
			}
		}
	}
	return nil
}

// emit appends one request of class ci at offset off (ns) after start.
func (g *generator) emit(start event.Time, off float64, ci int, r *rand.Rand) {
	c := &g.classes[ci]
	req := Request{
		At:           start + event.Time(math.Round(off)),
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
	g.out = append(g.out, req)
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

// fixedCount calls emit with the offsets (ns from the phase start) of
// exactly n arrivals within durNs: n+1 unit gaps are drawn and scaled to sum
// to durNs, and the first n partial sums are the arrival offsets. For the
// uniform process this spaces arrivals evenly at durNs*k/(n+1).
func (a *arrivals) fixedCount(n int, durNs float64, emit func(off float64)) {
	if n <= 0 {
		return
	}
	saved := *a.pcg
	total := 0.0
	for range n + 1 {
		total += a.gap()
	}
	*a.pcg = saved // replay the same gaps
	last := durNs - 1
	sum := 0.0
	for range n {
		sum += a.gap()
		off := 0.0
		if total > 0 {
			off = durNs * (sum / total)
		}
		emit(min(off, last))
	}
}
