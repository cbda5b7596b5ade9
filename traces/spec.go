package traces

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Limits that keep every accepted trace finite and cheap to generate.
const (
	// MaxTokens bounds every token length a distribution may produce.
	MaxTokens = 10_000_000
	// MaxRequests bounds the expected number of requests of a trace at the
	// scale it is generated at as a whole (Generate; a Request is 64
	// bytes), and the requests of an imported file.
	MaxRequests = 20_000_000
	// MaxStreamRequests bounds the expected number of requests of a
	// synthetic trace streamed (Stream), which holds no request it has
	// handed out: the simulator's sweeps stream.
	MaxStreamRequests = 2_000_000_000
	// MaxDuration bounds the total duration of a trace.
	MaxDuration = 1000 * time.Hour
	// MaxPrefixGroups bounds prefix.groups of a class.
	MaxPrefixGroups = 1_000_000_000
	// MaxSpecBytes bounds the size of a trace file.
	MaxSpecBytes = 8 << 20
)

// Arrival processes.
const (
	ProcessPoisson = "poisson" // exponential gaps
	ProcessUniform = "uniform" // evenly spaced arrivals
	ProcessGamma   = "gamma"   // gamma gaps with shape = burstiness
)

// Length distributions.
const (
	DistFixed     = "fixed"
	DistUniform   = "uniform"
	DistNormal    = "normal"
	DistLognormal = "lognormal"
	DistEmpirical = "empirical"
)

// Bounds of Arrival.Burstiness for the gamma process.
const (
	MinBurstiness = 0.01
	MaxBurstiness = 1000.0
)

// Request is one offered request of a generated trace.
type Request struct {
	At           event.Time // scheduled send time, ns since run start
	Class        string     // class name from the spec
	InputTokens  int        // prompt tokens, >= 1
	OutputTokens int        // output tokens the answer would naturally have, >= 1
	OutputCap    int        // max output tokens for the class (0 = no cap); when OutputTokens > OutputCap the engine stops at the cap ("length" finish)
	PrefixGroup  int64      // 0 = no shared prefix; requests with the same nonzero group share their first PrefixTokens tokens
	PrefixTokens int        // shared-prefix length, <= InputTokens
	// CacheGroup and CacheTokens name what the prompt leaves in an
	// engine's prefix cache once prefilled, when that is more than its
	// shared prefix: an imported Mooncake prompt leaves its whole path of
	// full blocks, the prefix of its next turn. 0: its prefix group.
	CacheGroup  int64
	CacheTokens int
}

// Spec is a parsed trace file. See the package documentation and docs/trace-format.md
// for the meaning of every field. A Spec built in Go rather than parsed
// should be checked with Validate; Generate does so itself.
type Spec struct {
	Name        string           `yaml:"name"`
	Description string           `yaml:"description,omitempty"`
	Seed        uint64           `yaml:"seed"`            // default seed for the CLI; 1 when the file omits it
	Fleet       string           `yaml:"fleet,omitempty"` // fleet the trace suggests; "" = none
	SLO         SLO              `yaml:"slo,omitempty"`
	Arrival     Arrival          `yaml:"arrival,omitempty"`
	BaseRate    float64          `yaml:"base_rate,omitempty"` // req/s that rate_multiplier multiplies; 0 = absent
	Classes     map[string]Class `yaml:"classes"`
	Phases      []Phase          `yaml:"phases"`
}

// SLO holds the latency objectives a trace suggests. They are stored only;
// zero means absent.
type SLO struct {
	TTFT time.Duration `yaml:"ttft,omitempty"` // time to first token
	TPOT time.Duration `yaml:"tpot,omitempty"` // time per output token
}

// Arrival selects the arrival process. The zero value means Poisson.
type Arrival struct {
	Process    string  `yaml:"process,omitempty"`    // poisson (default), uniform or gamma
	Burstiness float64 `yaml:"burstiness,omitempty"` // gamma shape k; for gamma, this or cv
	// CV is the gamma process's coefficient of variation of the gaps
	// (shape k = 1/CV^2: 1 is Poisson, 2 and 4 burstier); for gamma, this
	// or burstiness.
	CV float64 `yaml:"cv,omitempty"`
	// BatchMean > 1 makes arrivals come in batches: consecutive arrivals
	// are grouped into batches of k requests sent at the same instant (the
	// first one's), k geometric with this mean (Spec-level only).
	BatchMean float64 `yaml:"batch_mean,omitempty"`
}

// shape is the gamma shape k the arrival asks for.
func (a Arrival) shape() float64 {
	if a.CV > 0 {
		return 1 / (a.CV * a.CV)
	}
	return a.Burstiness
}

// Class describes one kind of request.
type Class struct {
	Input     Dist    `yaml:"input"`
	Output    Dist    `yaml:"output"`
	OutputCap int     `yaml:"output_cap,omitempty"` // 0 = no cap
	Prefix    *Prefix `yaml:"prefix,omitempty"`     // nil = no shared prefixes
}

// Prefix makes the requests of a class share prompt prefixes: each request
// picks one of Groups groups uniformly at random; all requests of a group
// share the group's first Tokens tokens (clipped to the request's input).
type Prefix struct {
	Groups int  `yaml:"groups"`
	Tokens Dist `yaml:"tokens"` // sampled once per group
	// Scope is where the groups live: "trace" (default; a request picks
	// any of the class's groups) or "phase" (each phase has its own
	// Groups groups, so the questions about one document arrive within
	// one phase).
	Scope string `yaml:"scope,omitempty"`
}

// Dist is a token-length distribution. Kind selects which of the other
// fields apply; the others must be absent (nil).
type Dist struct {
	Kind    string    `yaml:"dist"`
	Value   *int      `yaml:"value,omitempty"`   // fixed
	Min     *int      `yaml:"min,omitempty"`     // uniform, normal, lognormal (default 1 for normal and lognormal)
	Max     *int      `yaml:"max,omitempty"`     // uniform, normal, lognormal
	Mean    *float64  `yaml:"mean,omitempty"`    // normal
	Stddev  *float64  `yaml:"stddev,omitempty"`  // normal
	Median  *float64  `yaml:"median,omitempty"`  // lognormal: exp(mu)
	Sigma   *float64  `yaml:"sigma,omitempty"`   // lognormal: stddev of the log
	Values  []int     `yaml:"values,omitempty"`  // empirical
	Weights []float64 `yaml:"weights,omitempty"` // empirical, optional
}

// Phase is one load segment. Exactly one of Rate, RateMultiplier, Requests
// and Counts is set.
type Phase struct {
	Name           string             `yaml:"name,omitempty"`
	Duration       time.Duration      `yaml:"duration"`
	Rate           *float64           `yaml:"rate,omitempty"`            // req/s
	RateMultiplier *float64           `yaml:"rate_multiplier,omitempty"` // times Spec.BaseRate
	Requests       *int               `yaml:"requests,omitempty"`        // exactly this many arrivals at scale 1
	Mix            map[string]float64 `yaml:"mix,omitempty"`             // relative class weights (with Rate, RateMultiplier, Requests)
	Counts         map[string]int     `yaml:"counts,omitempty"`          // exact arrivals per class at scale 1
	Arrival        *Arrival           `yaml:"arrival,omitempty"`         // overrides Spec.Arrival for this phase
}

// Parse decodes a trace file strictly and validates it. source names the
// file in error messages. Parse never panics.
func Parse(data []byte, source string) (spec *Spec, err error) {
	if source == "" {
		source = "trace"
	}
	defer func() {
		if r := recover(); r != nil {
			spec, err = nil, fmt.Errorf("%s: cannot parse: internal error: %v", source, r)
		}
	}()
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("%s: file is %d bytes: expected at most %d", source, len(data), MaxSpecBytes)
	}
	s, errs := decodeSpec(data)
	if len(errs) == 0 {
		errs = s.validate()
	}
	if len(errs) > 0 {
		return nil, joinWithSource(source, errs)
	}
	return s, nil
}

func joinWithSource(source string, errs []error) error {
	wrapped := make([]error, len(errs))
	for i, e := range errs {
		wrapped[i] = fmt.Errorf("%s: %w", source, e)
	}
	return errors.Join(wrapped...)
}

// Load returns a built-in trace by name (see Builtin) or parses the .yaml or
// .yml file at nameOrPath.
func Load(nameOrPath string) (*Spec, error) {
	if data, ok := builtinData(nameOrPath); ok {
		return Parse(data, nameOrPath+".yaml (built-in)")
	}
	ext := strings.ToLower(filepath.Ext(nameOrPath))
	if ext != ".yaml" && ext != ".yml" {
		return nil, fmt.Errorf("trace %q: not a built-in trace and not a .yaml/.yml file: expected one of %s or a path to a .yaml/.yml file",
			nameOrPath, strings.Join(Builtin(), ", "))
	}
	f, err := os.Open(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", nameOrPath, err)
	}
	defer f.Close()
	data, err := readLimited(f, MaxSpecBytes)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", nameOrPath, err)
	}
	return Parse(data, nameOrPath)
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("file is larger than %d bytes", limit)
	}
	return data, nil
}

// Duration is the total of the phase durations.
func (s *Spec) Duration() event.Time {
	var total event.Time
	for _, p := range s.Phases {
		total += event.Time(p.Duration)
	}
	return total
}

// MeanRate is the expected mean arrival rate in requests per second at scale
// 1: the expected number of requests over the total duration.
func (s *Spec) MeanRate() float64 {
	d := s.Duration().Seconds()
	if d <= 0 {
		return 0
	}
	return s.ExpectedRequests(1) / d
}

// ExpectedRequests is the expected number of requests Generate returns at
// the given scale (exact for requests and counts phases, up to rounding).
func (s *Spec) ExpectedRequests(scale float64) float64 {
	total := 0.0
	for i := range s.Phases {
		total += s.phaseExpected(i, scale)
	}
	return total
}

// phaseExpected is the expected arrival count of phase i at scale.
func (s *Spec) phaseExpected(i int, scale float64) float64 {
	p := &s.Phases[i]
	switch {
	case p.Counts != nil:
		n := 0.0
		for _, c := range p.Counts {
			n += math.Round(float64(c) * scale)
		}
		return n
	case p.Requests != nil:
		return math.Round(float64(*p.Requests) * scale)
	default:
		return s.phaseRate(i) * scale * time.Duration(p.Duration).Seconds()
	}
}

// phaseRate is the written rate of a rate or rate_multiplier phase in req/s
// (0 for other phases).
func (s *Spec) phaseRate(i int) float64 {
	p := &s.Phases[i]
	switch {
	case p.Rate != nil:
		return *p.Rate
	case p.RateMultiplier != nil:
		return *p.RateMultiplier * s.BaseRate
	}
	return 0
}

// PhaseAt is the index of the phase whose interval [start, start+duration)
// holds t, or -1 when t is before 0 or at or after Duration.
func (s *Spec) PhaseAt(t event.Time) int {
	if t < 0 {
		return -1
	}
	var start event.Time
	for i, p := range s.Phases {
		end := start + event.Time(p.Duration)
		if t < end {
			return i
		}
		start = end
	}
	return -1
}

// arrivalOf is the arrival process of phase i.
func (s *Spec) arrivalOf(i int) Arrival {
	if a := s.Phases[i].Arrival; a != nil {
		return *a
	}
	return s.Arrival
}
