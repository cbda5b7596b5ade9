package timing

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

// Arrow §3.1: prefill is quadratic in prompt length; the reference's demo
// profile gives these published values.
func TestPrefillReferenceValues(t *testing.T) {
	for _, c := range []struct {
		n    int
		want float64
	}{{200, 0.0178}, {2048, 0.2118}, {6000, 1.085}, {7500, 1.58}, {16000, 6.085}} {
		if got := Reference.Prefill(c.n); !near(got, c.want, 1e-3) {
			t.Errorf("T(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

// Arrow §3.1: chunking never changes what a prompt costs: the spans of any
// cut sum to T(n).
func TestPrefillSpanSumsToProfile(t *testing.T) {
	p := Reference
	n := 7500
	var sum float64
	for from := 0; from < n; from += 2048 {
		sum += p.PrefillSpan(from, min(from+2048, n))
	}
	if !near(sum, p.Prefill(n), 1e-12) {
		t.Fatalf("sum of chunks %v, want T(%d) = %v", sum, n, p.Prefill(n))
	}
	if got, want := p.PrefillSpan(1000, n), p.Prefill(n)-p.Prefill(1000); !near(got, want, 1e-12) {
		t.Fatalf("cached span %v, want %v", got, want)
	}
}

// Arrow §5.3: MT is the largest batch meeting the TPOT SLO.
func TestMaxTokens(t *testing.T) {
	if got := Reference.MaxTokens(0.125); !near(got, 37666.666666, 1e-6) {
		t.Errorf("MT = %v, want 37666.67", got)
	}
	if got := (Profile{Intercept: 0.2, Slope: 1e-6}).MaxTokens(0.125); got != 0 {
		t.Errorf("MT with intercept above SLO = %v, want 0", got)
	}
	if got := (Profile{Intercept: 0.01}).MaxTokens(0.125); !math.IsInf(got, 1) {
		t.Errorf("MT with flat interval = %v, want +Inf", got)
	}
	fixture := Profile{A: 1e-8, B: 1e-3, Slope: 1.25e-5}
	if got := fixture.MaxTokens(0.05); !near(got, 4000, 1e-9) {
		t.Errorf("fixture MT = %v, want 4000", got)
	}
}

// Arrow §3.1: the reference's fitting fixtures.
func TestFits(t *testing.T) {
	a, b, c, err := FitQuadratic([]Sample{{0, 1}, {10, 3}, {20, 9}, {30, 19}})
	if err != nil || !near(a, 0.02, 1e-9) || !near(b, 0, 1e-9) || !near(c, 1, 1e-9) {
		t.Fatalf("quadratic = (%v, %v, %v), %v; want (0.02, 0, 1)", a, b, c, err)
	}
	m, k, err := FitLinear([]Sample{{0, 0.01}, {1000, 0.02}})
	if err != nil || !near(m, 1e-5, 1e-9) || !near(k, 0.01, 1e-9) {
		t.Fatalf("linear = (%v, %v), %v; want (1e-5, 0.01)", m, k, err)
	}
	// Recover the demo profile from exact samples at realistic magnitudes.
	var pre, dec []Sample
	for _, n := range []int{256, 512, 1024, 2048, 4096, 8192, 12288, 16384} {
		pre = append(pre, Sample{float64(n), Reference.Prefill(n)})
	}
	for _, b := range []int64{512, 2048, 8192, 24576} {
		dec = append(dec, Sample{float64(b), Reference.Interval(b)})
	}
	p, err := FitProfile(pre, dec)
	if err != nil {
		t.Fatal(err)
	}
	if !near(p.A, Reference.A, 1e-6) || !near(p.B, Reference.B, 1e-6) || !near(p.C, Reference.C, 1e-6) ||
		!near(p.Slope, Reference.Slope, 1e-9) || !near(p.Intercept, Reference.Intercept, 1e-9) {
		t.Fatalf("fit %+v, want %+v", p, Reference)
	}
}

func TestFitErrors(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"too few quadratic", second(FitQuadratic([]Sample{{1, 1}, {2, 2}})), "2 samples: expected at least 3"},
		{"degenerate quadratic", second(FitQuadratic([]Sample{{1, 1}, {1, 2}, {2, 2}})), "2 distinct x values"},
		{"too few linear", lin(FitLinear([]Sample{{1, 1}})), "1 samples: expected at least 2"},
		{"degenerate linear", lin(FitLinear([]Sample{{3, 1}, {3, 2}})), "all x equal"},
		{"nan", lin(FitLinear([]Sample{{1, math.NaN()}, {3, 2}})), "expected finite numbers"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to contain %q", c.name, c.err, c.want)
		}
	}
	if err := second(FitQuadratic([]Sample{{5, 1}, {5, 2}, {5, 3}})); !errors.Is(err, ErrDegenerate) {
		t.Errorf("all-equal x: %v, want ErrDegenerate", err)
	}
}

func second(_, _, _ float64, err error) error { return err }
func lin(_, _ float64, err error) error       { return err }

func TestProfileValidate(t *testing.T) {
	if err := Reference.Validate(); err != nil {
		t.Fatal(err)
	}
	err := Profile{A: math.NaN(), Slope: -1, Intercept: -0.1}.Validate()
	for _, want := range []string{"a: NaN", "slope: -1: expected >= 0", "intercept: -0.1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to mention %q", err, want)
		}
	}
}

// Arrow §5.4: a flat KV transfer costs its latency whatever the size and
// never queues.
func TestKVFlat(t *testing.T) {
	var l Link
	for i := 0; i < 3; i++ {
		if got := l.Transfer(FlatKV, event.Second, 100000); got != event.Second+50*event.Millisecond {
			t.Fatalf("flat transfer ready at %v, want 1.050s", got)
		}
	}
}

// With bandwidth, transfers from one source serialise FCFS (Arrow §5.4).
func TestKVLinkQueue(t *testing.T) {
	k := KV{Latency: 0.001, BytesPerToken: 1000, Bandwidth: 1e9} // 1 µs per token on the wire
	var l Link
	first := l.Transfer(k, 0, 10000)  // wire 10 ms
	second := l.Transfer(k, 0, 10000) // queues behind the first
	if first != 11*event.Millisecond || second != 21*event.Millisecond {
		t.Fatalf("ready at %v and %v, want 11ms and 21ms", first, second)
	}
	later := l.Transfer(k, event.Second, 1000) // link idle again
	if later != event.Second+2*event.Millisecond {
		t.Fatalf("idle-link transfer ready at %v, want 1.002s", later)
	}
	if err := (KV{BytesPerToken: 10}).Validate(); err == nil {
		t.Fatal("bytes without bandwidth validated")
	}
}
