package traces

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

func secs(s float64) event.Time { return event.Seconds(s) }

func mustParse(t testing.TB, src string) *Spec {
	t.Helper()
	s, err := Parse([]byte(src), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustGenerate(t testing.TB, s *Spec, seed uint64, scale float64) []Request {
	t.Helper()
	reqs, err := s.Generate(seed, scale)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, s, reqs)
	return reqs
}

// checkInvariants checks what every generated trace must satisfy.
func checkInvariants(t testing.TB, s *Spec, reqs []Request) {
	t.Helper()
	end := s.Duration()
	groupLen := map[int64]int{} // longest prefix seen per group
	for i, r := range reqs {
		if i > 0 && r.At < reqs[i-1].At {
			t.Fatalf("request %d at %v before request %d at %v", i, r.At, i-1, reqs[i-1].At)
		}
		if r.At < 0 || r.At >= end {
			t.Fatalf("request %d at %v outside [0, %v)", i, r.At, end)
		}
		c, ok := s.Classes[r.Class]
		if !ok {
			t.Fatalf("request %d: unknown class %q", i, r.Class)
		}
		if r.InputTokens < 1 || r.OutputTokens < 1 || r.InputTokens > MaxTokens || r.OutputTokens > MaxTokens {
			t.Fatalf("request %d: lengths %d/%d", i, r.InputTokens, r.OutputTokens)
		}
		if r.OutputCap != c.OutputCap {
			t.Fatalf("request %d: cap %d, class cap %d", i, r.OutputCap, c.OutputCap)
		}
		if (r.PrefixGroup != 0) != (c.Prefix != nil) {
			t.Fatalf("request %d: prefix group %d for class %s", i, r.PrefixGroup, r.Class)
		}
		if r.PrefixTokens < 0 || r.PrefixTokens > r.InputTokens || (r.PrefixGroup == 0 && r.PrefixTokens != 0) {
			t.Fatalf("request %d: prefix %d of input %d", i, r.PrefixTokens, r.InputTokens)
		}
		if r.PrefixGroup != 0 {
			if r.PrefixTokens < 1 {
				t.Fatalf("request %d: empty prefix in group %d", i, r.PrefixGroup)
			}
			groupLen[r.PrefixGroup] = max(groupLen[r.PrefixGroup], r.PrefixTokens)
		}
	}
	// Within a group, a request's prefix is the group's prefix clipped to
	// its input.
	for i, r := range reqs {
		if r.PrefixGroup != 0 && r.PrefixTokens != min(groupLen[r.PrefixGroup], r.InputTokens) {
			t.Fatalf("request %d: prefix %d, group %d has %d, input %d",
				i, r.PrefixTokens, r.PrefixGroup, groupLen[r.PrefixGroup], r.InputTokens)
		}
	}
}

// byPhase splits requests by the phase holding their At.
func byPhase(s *Spec, reqs []Request) [][]Request {
	out := make([][]Request, len(s.Phases))
	for _, r := range reqs {
		p := s.PhaseAt(r.At)
		out[p] = append(out[p], r)
	}
	return out
}

func phaseStart(s *Spec, p int) event.Time {
	var t event.Time
	for i := range p {
		t += event.Time(s.Phases[i].Duration)
	}
	return t
}

func TestDeterminism(t *testing.T) {
	for _, name := range Builtin() {
		s, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		a := mustGenerate(t, s, s.Seed, 1)
		b := mustGenerate(t, s, s.Seed, 1)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: same seed, different traces", name)
		}
		c := mustGenerate(t, s, s.Seed+1, 1)
		if reflect.DeepEqual(a, c) {
			t.Errorf("%s: different seeds, same trace", name)
		}
		same := 0
		for i := range min(len(a), len(c)) {
			if a[i] == c[i] {
				same++
			}
		}
		if same > len(a)/100 {
			t.Errorf("%s: %d of %d requests identical across seeds", name, same, len(a))
		}
	}
}

// TestScale: raising the scale compresses the same arrival sequence. The
// k-th request of a phase keeps its class and lengths, rate phases keep
// their unit-rate arrival times (offsets halve at scale 2), and counts
// double.
func TestScale(t *testing.T) {
	for _, name := range []string{"demo", "chatdoc"} {
		s, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		one := byPhase(s, mustGenerate(t, s, 3, 1))
		two := byPhase(s, mustGenerate(t, s, 3, 2))
		n1, n2 := 0, 0
		for p := range s.Phases {
			n1 += len(one[p])
			n2 += len(two[p])
			if s.Phases[p].Requests != nil && len(two[p]) != 2*len(one[p]) {
				t.Errorf("%s phase %d: %d requests at scale 2, %d at scale 1", name, p, len(two[p]), len(one[p]))
			}
			if len(two[p]) < len(one[p]) {
				t.Fatalf("%s phase %d: fewer requests at scale 2", name, p)
			}
			start := phaseStart(s, p)
			for k, r1 := range one[p] {
				r2 := two[p][k]
				if r1.Class != r2.Class || r1.InputTokens != r2.InputTokens || r1.OutputTokens != r2.OutputTokens ||
					r1.PrefixGroup != r2.PrefixGroup || r1.PrefixTokens != r2.PrefixTokens {
					t.Fatalf("%s phase %d request %d differs: %+v vs %+v", name, p, k, r1, r2)
				}
				if s.Phases[p].Requests == nil {
					off1, off2 := float64(r1.At-start), float64(r2.At-start)
					if math.Abs(off1/2-off2) > 1 {
						t.Fatalf("%s phase %d request %d: offset %v at scale 1, %v at scale 2", name, p, k, off1, off2)
					}
				}
			}
		}
		ratio := float64(n2) / float64(n1)
		if ratio < 1.7 || ratio > 2.3 {
			t.Errorf("%s: %d requests at scale 2, %d at scale 1", name, n2, n1)
		}
	}
}

func TestExactCounts(t *testing.T) {
	count := func(reqs []Request) map[string]int {
		m := map[string]int{}
		for _, r := range reqs {
			m[r.Class]++
		}
		return m
	}
	cd, err := Load("chatdoc")
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range []uint64{1, 2, 99} {
		reqs := mustGenerate(t, cd, seed, 1)
		if got := count(reqs); len(reqs) != 14250 || got["chat"] != 6810 || got["document"] != 7440 {
			t.Errorf("chatdoc seed %d: %d requests, %v", seed, len(reqs), got)
		}
		for p, rs := range byPhase(cd, reqs) {
			if len(rs) != *cd.Phases[p].Requests {
				t.Errorf("chatdoc phase %d: %d requests, want %d", p, len(rs), *cd.Phases[p].Requests)
			}
		}
	}
	if got := cd.ExpectedRequests(1); got != 14250 {
		t.Errorf("chatdoc ExpectedRequests = %v", got)
	}

	mx, err := Load("mixed")
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range []uint64{1, 2, 99} {
		reqs := mustGenerate(t, mx, seed, 1)
		got := count(reqs)
		if len(reqs) != 14419 || got["document"] != 6310 || len(reqs)-got["document"] != 8109 {
			t.Errorf("mixed seed %d: %d requests, %v", seed, len(reqs), got)
		}
		for p, rs := range byPhase(mx, reqs) {
			if pc := count(rs); !reflect.DeepEqual(pc, mx.Phases[p].Counts) {
				t.Errorf("mixed phase %d: counts %v, want %v", p, pc, mx.Phases[p].Counts)
			}
		}
	}
	// Counts scale per class.
	reqs := mustGenerate(t, mx, 1, 0.5)
	want := 0
	for _, p := range mx.Phases {
		for _, n := range p.Counts {
			want += int(math.Round(float64(n) * 0.5))
		}
	}
	if len(reqs) != want || float64(want) != mx.ExpectedRequests(0.5) {
		t.Errorf("mixed at scale 0.5: %d requests, want %d", len(reqs), want)
	}
}

// TestCountsShuffled: a counts phase interleaves its classes.
func TestCountsShuffled(t *testing.T) {
	s := mustParse(t, `
name: t
classes:
  a: {input: {dist: fixed, value: 1}, output: {dist: fixed, value: 1}}
  b: {input: {dist: fixed, value: 2}, output: {dist: fixed, value: 2}}
phases:
  - {duration: 100s, counts: {a: 500, b: 500}}
`)
	reqs := mustGenerate(t, s, 1, 1)
	switches := 0
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Class != reqs[i-1].Class {
			switches++
		}
	}
	if switches < 400 { // about 500 for a random order
		t.Errorf("only %d class switches in 1000 shuffled requests", switches)
	}
}

func TestPoissonCount(t *testing.T) {
	s := mustParse(t, `
name: t
classes:
  a: {input: {dist: uniform, min: 10, max: 20}, output: {dist: uniform, min: 1, max: 3}}
phases:
  - {duration: 1000s, rate: 5, mix: {a: 1}}
`)
	for seed := uint64(1); seed <= 10; seed++ {
		reqs := mustGenerate(t, s, seed, 1)
		if n := float64(len(reqs)); math.Abs(n-5000) > 5*math.Sqrt(5000) {
			t.Errorf("seed %d: %v arrivals, expected 5000 +- %.0f", seed, n, 5*math.Sqrt(5000))
		}
		mean, cv2 := gapStats(reqs)
		if math.Abs(mean-0.2) > 0.02 || math.Abs(cv2-1) > 0.15 {
			t.Errorf("seed %d: mean gap %v (want 0.2), squared CV %v (want 1)", seed, mean, cv2)
		}
	}
}

// gapStats returns the mean gap in seconds and the squared coefficient of
// variation of the gaps.
func gapStats(reqs []Request) (mean, cv2 float64) {
	var sum, sum2 float64
	prev := event.Time(0)
	for _, r := range reqs {
		g := (r.At - prev).Seconds()
		sum += g
		sum2 += g * g
		prev = r.At
	}
	n := float64(len(reqs))
	mean = sum / n
	return mean, (sum2/n - mean*mean) / (mean * mean)
}

func TestGammaAndUniformProcesses(t *testing.T) {
	src := `
name: t
arrival: {process: gamma, burstiness: 0.25}
classes:
  a: {input: {dist: fixed, value: 1}, output: {dist: fixed, value: 1}}
phases:
  - {duration: 2000s, rate: 5, mix: {a: 1}}
  - {duration: 1000s, rate: 5, mix: {a: 1}, arrival: {process: gamma, burstiness: 4}}
  - {duration: 1000s, rate: 5, mix: {a: 1}, arrival: {process: uniform}}
  - {duration: 10s, requests: 9, mix: {a: 1}, arrival: {process: uniform}}
`
	s := mustParse(t, src)
	ph := byPhase(s, mustGenerate(t, s, 5, 1))
	// Gamma with shape k: mean gap 1/rate, squared CV 1/k.
	for p, k := range map[int]float64{0: 0.25, 1: 4} {
		rs := rebase(ph[p], phaseStart(s, p))
		mean, cv2 := gapStats(rs)
		if math.Abs(mean-0.2)/0.2 > 0.1 || math.Abs(cv2-1/k)/(1/k) > 0.25 {
			t.Errorf("gamma k=%v: mean gap %v (want 0.2), squared CV %v (want %v)", k, mean, cv2, 1/k)
		}
	}
	// Uniform rate phase: first arrival one gap after the start, then every
	// 200 ms; an arrival exactly at the phase end belongs to no phase.
	u := ph[2]
	if len(u) != 4999 {
		t.Errorf("uniform phase: %d arrivals, want 4999", len(u))
	}
	for k, r := range u {
		if want := phaseStart(s, 2) + event.Time(k+1)*200*event.Millisecond; r.At != want {
			t.Fatalf("uniform arrival %d at %v, want %v", k, r.At, want)
		}
	}
	// Uniform requests phase: N arrivals at duration*k/(N+1).
	if len(ph[3]) != 9 {
		t.Fatalf("uniform requests phase: %d arrivals", len(ph[3]))
	}
	for k, r := range ph[3] {
		if want := phaseStart(s, 3) + event.Time(k+1)*event.Second; r.At != want {
			t.Errorf("uniform requests arrival %d at %v, want %v", k, r.At, want)
		}
	}
}

// rebase shifts requests so that start is time 0.
func rebase(reqs []Request, start event.Time) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.At -= start
		out[i] = r
	}
	return out
}

// TestNoBoundaryDrift: a phase's arrivals do not depend on the phases before
// it, and each phase starts at its nominal time.
func TestNoBoundaryDrift(t *testing.T) {
	base := `
name: t
classes:
  a: {input: {dist: uniform, min: 1, max: 100}, output: {dist: uniform, min: 1, max: 100}}
phases:
  - {duration: 30s, rate: RATE, mix: {a: 1}}
  - {duration: 30s, rate: 2, mix: {a: 1}}
`
	slow := mustParse(t, strings.Replace(base, "RATE", "0.1", 1))
	fast := mustParse(t, strings.Replace(base, "RATE", "50", 1))
	a := byPhase(slow, mustGenerate(t, slow, 9, 1))[1]
	b := byPhase(fast, mustGenerate(t, fast, 9, 1))[1]
	if !reflect.DeepEqual(a, b) || len(a) == 0 {
		t.Errorf("phase 1 depends on phase 0: %d vs %d requests", len(a), len(b))
	}
	for _, r := range a {
		if r.At < secs(30) {
			t.Fatalf("phase 1 request at %v", r.At)
		}
	}
}

func TestLengthDistributions(t *testing.T) {
	s := mustParse(t, `
name: t
classes:
  uni:
    input:  {dist: uniform, min: 200, max: 400}
    output: {dist: fixed, value: 7}
  norm:
    input:  {dist: normal, mean: 500, stddev: 300, min: 100, max: 800}
    output: {dist: normal, mean: 3, stddev: 5, max: 10}
  logn:
    input:  {dist: lognormal, median: 1000, sigma: 1, min: 50, max: 5000}
    output: {dist: lognormal, median: 100, sigma: 0.1, max: 100000}
  emp:
    input:  {dist: empirical, values: [10, 20, 30], weights: [1, 0, 3]}
    output: {dist: empirical, values: [5, 6]}
phases:
  - {duration: 1000s, rate: 20, mix: {uni: 1, norm: 1, logn: 1, emp: 1}}
`)
	reqs := mustGenerate(t, s, 11, 1)
	type stat struct {
		n                    int
		inMin, inMax, outMin int
		outMax               int
		inSum, logOutSum     float64
		in                   map[int]int
	}
	st := map[string]*stat{}
	for _, r := range reqs {
		x := st[r.Class]
		if x == nil {
			x = &stat{inMin: math.MaxInt, outMin: math.MaxInt, in: map[int]int{}}
			st[r.Class] = x
		}
		x.n++
		x.inMin, x.inMax = min(x.inMin, r.InputTokens), max(x.inMax, r.InputTokens)
		x.outMin, x.outMax = min(x.outMin, r.OutputTokens), max(x.outMax, r.OutputTokens)
		x.inSum += float64(r.InputTokens)
		x.logOutSum += math.Log(float64(r.OutputTokens))
		x.in[r.InputTokens]++
	}
	for _, name := range []string{"uni", "norm", "logn", "emp"} {
		if st[name] == nil || st[name].n < 4000 {
			t.Fatalf("class %s: too few requests: %+v", name, st[name])
		}
	}
	if x := st["uni"]; x.inMin != 200 || x.inMax != 400 || x.outMin != 7 || x.outMax != 7 || math.Abs(x.inSum/float64(x.n)-300) > 5 {
		t.Errorf("uniform: %+v", x)
	}
	// Clipped normal: within [min, max], and both bounds reached.
	if x := st["norm"]; x.inMin != 100 || x.inMax != 800 || x.outMin != 1 || x.outMax != 10 {
		t.Errorf("normal: input [%d, %d], output [%d, %d]", x.inMin, x.inMax, x.outMin, x.outMax)
	}
	// Lognormal: median parametrisation (mean of the log = log median).
	if x := st["logn"]; x.inMin < 50 || x.inMax > 5000 || math.Abs(x.logOutSum/float64(x.n)-math.Log(100)) > 0.01 {
		t.Errorf("lognormal: input [%d, %d], mean log output %v (want %v)", x.inMin, x.inMax, x.logOutSum/float64(x.n), math.Log(100))
	}
	// Empirical: only listed values, zero weights never drawn, 1:3 odds.
	if x := st["emp"]; x.in[20] != 0 || x.in[10]+x.in[30] != x.n || x.outMin != 5 || x.outMax != 6 {
		t.Errorf("empirical: %v, output [%d, %d]", x.in, x.outMin, x.outMax)
	} else if f := float64(x.in[30]) / float64(x.n); math.Abs(f-0.75) > 0.03 {
		t.Errorf("empirical: share of 30 = %v, want 0.75", f)
	}
}

func TestPrefixGroups(t *testing.T) {
	mx, err := Load("mixed")
	if err != nil {
		t.Fatal(err)
	}
	names := mx.classNames()
	reqs := mustGenerate(t, mx, 4, 1)
	groups := map[int64]int{}
	for _, r := range reqs {
		if r.PrefixGroup == 0 {
			continue
		}
		groups[r.PrefixGroup]++
		ci := int(r.PrefixGroup >> 32)
		gi := r.PrefixGroup & (1<<32 - 1)
		// Phase-scoped groups: phase k uses k*groups+1 .. (k+1)*groups.
		pr := mx.Classes[r.Class].Prefix
		phase := int64(mx.PhaseAt(r.At))
		lo, hi := phase*int64(pr.Groups)+1, (phase+1)*int64(pr.Groups)
		if names[ci] != r.Class || pr.Scope != "phase" || gi < lo || gi > hi {
			t.Fatalf("request of class %s in phase %d has group id %#x", r.Class, phase, r.PrefixGroup)
		}
	}
	// 9 phases of 140 document groups and 35 conversation groups, most of
	// them used.
	if n := len(groups); n < 1300 || n > 9*(140+35) {
		t.Errorf("%d prefix groups in use", n)
	}
	// A group's prefix length does not depend on the scale.
	twice := mustGenerate(t, mx, 4, 2)
	lens := map[int64]int{}
	for _, r := range reqs {
		if r.PrefixGroup != 0 && r.PrefixTokens < r.InputTokens {
			lens[r.PrefixGroup] = r.PrefixTokens
		}
	}
	for _, r := range twice {
		if n, ok := lens[r.PrefixGroup]; ok && r.PrefixTokens < r.InputTokens && n != r.PrefixTokens {
			t.Fatalf("group %#x: prefix %d at scale 1, %d at scale 2", r.PrefixGroup, n, r.PrefixTokens)
		}
	}
}

func TestPrefixClippedToInput(t *testing.T) {
	s := mustParse(t, `
name: t
classes:
  a:
    input: {dist: uniform, min: 1, max: 100}
    output: {dist: fixed, value: 1}
    prefix: {groups: 2, tokens: {dist: fixed, value: 50}}
phases:
  - {duration: 100s, rate: 10, mix: {a: 1}}
`)
	clipped := 0
	for _, r := range mustGenerate(t, s, 1, 1) {
		if r.PrefixTokens != min(50, r.InputTokens) {
			t.Fatalf("%+v", r)
		}
		if r.InputTokens < 50 {
			clipped++
		}
	}
	if clipped == 0 {
		t.Error("no clipped prefixes")
	}
}

func TestIdlePhases(t *testing.T) {
	s := mustParse(t, `
name: t
base_rate: 3
classes:
  a: {input: {dist: fixed, value: 1}, output: {dist: fixed, value: 1}}
phases:
  - {duration: 10s, rate: 0}
  - {duration: 10s, requests: 0}
  - {duration: 10s, rate_multiplier: 0}
  - {duration: 10s, counts: {a: 0}}
  - {duration: 10s, rate_multiplier: 1, mix: {a: 1}}
`)
	reqs := mustGenerate(t, s, 1, 1)
	for _, r := range reqs {
		if r.At < secs(40) {
			t.Fatalf("arrival in an idle phase: %+v", r)
		}
	}
	if len(reqs) == 0 {
		t.Error("no arrivals in the last phase")
	}
}

func TestGenerateErrors(t *testing.T) {
	s, err := Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, scale := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := s.Generate(1, scale); err == nil || !strings.Contains(err.Error(), "expected a finite number > 0") {
			t.Errorf("scale %v: %v", scale, err)
		}
	}
	if _, err := s.Generate(1, 1e9); err == nil || !strings.Contains(err.Error(), "expected at most") {
		t.Errorf("huge scale: %v", err)
	}
	bad := *s
	bad.Phases = nil
	if _, err := bad.Generate(1, 1); err == nil || !strings.Contains(err.Error(), "phases: missing") {
		t.Errorf("invalid spec: %v", err)
	}
}

func TestMeanRate(t *testing.T) {
	cd, err := Load("chatdoc")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cd.MeanRate(), 14250.0/3600; math.Abs(got-want) > 1e-9 {
		t.Errorf("chatdoc MeanRate = %v, want %v", got, want)
	}
	empty := &Spec{}
	if empty.MeanRate() != 0 {
		t.Error("MeanRate of an empty spec")
	}
}

// BenchmarkGenerate generates 1,000,000 requests per iteration.
func BenchmarkGenerate(b *testing.B) {
	s := mustParse(b, `
name: bench
classes:
  chat:
    input:  {dist: lognormal, median: 600, sigma: 0.6, min: 16, max: 8192}
    output: {dist: normal, mean: 250, stddev: 100, min: 8, max: 2048}
  doc:
    input:  {dist: uniform, min: 6000, max: 9000}
    output: {dist: empirical, values: [50, 100, 200], weights: [1, 2, 1]}
    prefix: {groups: 5000, tokens: {dist: uniform, min: 5000, max: 6000}}
phases:
  - {duration: 500s, rate: 1000, mix: {chat: 2, doc: 1}}
  - {duration: 500s, requests: 500000, mix: {chat: 1, doc: 2}}
`)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		reqs, err := s.Generate(1, 1)
		if err != nil {
			b.Fatal(err)
		}
		n = len(reqs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/request")
}
