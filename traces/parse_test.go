package traces

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

// TestBadInputs parses every testdata/*.bad.yaml and checks that the error
// holds each line of the sibling .want file, and that every reported line
// names the source file.
func TestBadInputs(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d bad inputs", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".bad.yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			wantData, err := os.ReadFile(strings.TrimSuffix(file, ".bad.yaml") + ".want")
			if err != nil {
				t.Fatal(err)
			}
			source := filepath.Base(file)
			spec, err := Parse(data, source)
			if err == nil {
				t.Fatalf("Parse accepted %s: %+v", file, spec)
			}
			if spec != nil {
				t.Errorf("Parse returned a spec with an error")
			}
			msg := err.Error()
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, source+": ") {
					t.Errorf("error line does not name the source %q: %q", source, line)
				}
			}
			var wants []string
			for _, w := range strings.Split(strings.TrimSpace(string(wantData)), "\n") {
				if w = strings.TrimSpace(w); w != "" {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("empty .want file")
			}
			for _, w := range wants {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q; got:\n%s", w, msg)
				}
			}
		})
	}
}

// TestValidateReportsEverything checks that all violations are reported at
// once, in schema order (top-level fields, classes by name, phases by index).
func TestValidateReportsEverything(t *testing.T) {
	src := `
name: t
fleet: "bad fleet"
slo: {ttft: -1s}
classes:
  zeta:
    input:  {dist: uniform, min: 5, max: 1}
    output: {dist: fixed, value: 3}
  alpha:
    input:  {dist: lognormal, median: 10, sigma: 0, max: 100}
    output: {dist: fixed, value: 3}
phases:
  - {duration: 10s, rate: -2, mix: {alpha: 1}}
  - {duration: 10s, rate: 1, requests: 3, mix: {nope: 1}}
  - {duration: 10s, rate_multiplier: 1, mix: {alpha: 1}}
`
	_, err := Parse([]byte(src), "x.yaml")
	if err == nil {
		t.Fatal("no error")
	}
	want := strings.Join([]string{
		`x.yaml: fleet: "bad fleet": expected letters, digits, '_', '-' or '.', starting with a letter or digit, at most 64 characters`,
		`x.yaml: slo.ttft: -1s: expected a duration >= 0`,
		`x.yaml: base_rate: missing: expected a rate > 0 (requests per second) because phases[2] uses rate_multiplier`,
		`x.yaml: classes.alpha.input.sigma: 0: expected a number > 0`,
		`x.yaml: classes.zeta.input: max 1 < min 5: expected max >= min`,
		`x.yaml: phases[0].rate: -2: expected a rate >= 0 (requests per second)`,
		`x.yaml: phases[1]: rate and requests given together: expected exactly one of rate, rate_multiplier, requests, counts`,
		`x.yaml: phases[1].mix.nope: unknown class "nope": expected one of alpha, zeta`,
	}, "\n")
	if got := err.Error(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	// The same spec, validated twice, gives the same text.
	_, err2 := Parse([]byte(src), "x.yaml")
	if err2.Error() != err.Error() {
		t.Error("error text is not deterministic")
	}
}

func TestBuiltins(t *testing.T) {
	names := Builtin()
	if want := []string{"chatdoc", "day", "demo", "mixed", "steady"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("Builtin() = %v, want %v", names, want)
	}
	for _, name := range names {
		s, err := Load(name)
		if err != nil {
			t.Fatalf("Load(%q): %v", name, err)
		}
		if s.Name != name {
			t.Errorf("Load(%q).Name = %q", name, s.Name)
		}
		if s.Description == "" {
			t.Errorf("%s: no description", name)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
		// The same file is loadable by path.
		byPath, err := Load(name + ".yaml")
		if err != nil {
			t.Fatalf("Load(%q): %v", name+".yaml", err)
		}
		if !reflect.DeepEqual(s, byPath) {
			t.Errorf("%s: built-in and file differ", name)
		}
	}
}

func TestDemo(t *testing.T) {
	s, err := Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.MeanRate(); math.Abs(got-2.4) > 1e-9 {
		t.Errorf("MeanRate = %v, want 2.4", got)
	}
	if s.Duration() != 90*1e9 {
		t.Errorf("Duration = %v, want 90s", s.Duration())
	}
	if s.Seed != 7 || s.Fleet != "demo" || s.SLO.TTFT != 10*time.Second || s.SLO.TPOT != 125*time.Millisecond {
		t.Errorf("seed/fleet/slo = %d %q %+v", s.Seed, s.Fleet, s.SLO)
	}
	if len(s.Phases) != 3 {
		t.Fatalf("%d phases", len(s.Phases))
	}
	for i, p := range s.Phases {
		if p.Duration != 30*time.Second || s.phaseRate(i) != 2.4 {
			t.Errorf("phase %d: duration %v rate %v", i, p.Duration, s.phaseRate(i))
		}
	}
	in := func(class string) (lo, hi int) {
		d := s.Classes[class].Input
		return *d.Min, *d.Max
	}
	if lo, hi := in(s.onlyClass(t, 0)); lo != 200 || hi != 400 {
		t.Errorf("segment 1 input [%d, %d]", lo, hi)
	}
	if lo, hi := in(s.onlyClass(t, 1)); lo != 6000 || hi != 9000 {
		t.Errorf("segment 2 input [%d, %d]", lo, hi)
	}
	if s.onlyClass(t, 0) != s.onlyClass(t, 2) {
		t.Error("segments 1 and 3 differ")
	}
}

// onlyClass is the single class of phase i's mix.
func (s *Spec) onlyClass(t *testing.T, i int) string {
	t.Helper()
	if len(s.Phases[i].Mix) != 1 {
		t.Fatalf("phase %d mix %v", i, s.Phases[i].Mix)
	}
	for name := range s.Phases[i].Mix {
		return name
	}
	return ""
}

func TestChatdocAndMixedSpecs(t *testing.T) {
	for _, name := range []string{"chatdoc", "mixed"} {
		s, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if s.SLO.TTFT != 2100*time.Millisecond || s.SLO.TPOT != 45*time.Millisecond {
			t.Errorf("%s: slo %+v", name, s.SLO)
		}
		if s.Duration() != 3600*1e9 {
			t.Errorf("%s: duration %v", name, s.Duration())
		}
	}
	s, _ := Load("chatdoc")
	if len(s.Phases) != 11 {
		t.Fatalf("chatdoc: %d phases", len(s.Phases))
	}
	for i := range s.Phases {
		want := "chat"
		if i%2 == 1 {
			want = "document"
		}
		if got := s.onlyClass(t, i); got != want {
			t.Errorf("chatdoc phase %d: class %s, want %s", i, got, want)
		}
	}
	m, _ := Load("mixed")
	if len(m.Phases) != 9 || len(m.Classes) != 5 {
		t.Errorf("mixed: %d phases, %d classes", len(m.Phases), len(m.Classes))
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load("nope"); err == nil || !strings.Contains(err.Error(), "chatdoc, day, demo, mixed") {
		t.Errorf("Load(nope) = %v", err)
	}
	if _, err := Load("testdata/does-not-exist.yaml"); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	if _, err := Load("testdata/negative_rate.bad.yaml"); err == nil ||
		!strings.HasPrefix(err.Error(), "testdata/negative_rate.bad.yaml: phases[0].rate") {
		t.Errorf("Load(bad file) = %v", err)
	}
}

func TestSeedDefault(t *testing.T) {
	base := "name: t\nclasses: {a: {input: {dist: fixed, value: 1}, output: {dist: fixed, value: 1}}}\nphases: [{duration: 1s, rate: 1, mix: {a: 1}}]\n"
	for _, c := range []struct {
		extra string
		want  uint64
	}{
		{"", 1},
		{"seed: 0\n", 0},
		{"seed: 42\n", 42},
		{"seed: 18446744073709551615\n", math.MaxUint64},
	} {
		s, err := Parse([]byte(base+c.extra), "t")
		if err != nil {
			t.Fatal(err)
		}
		if s.Seed != c.want {
			t.Errorf("%q: seed %d, want %d", c.extra, s.Seed, c.want)
		}
	}
}

func TestDurations(t *testing.T) {
	for _, c := range []struct {
		text string
		want time.Duration
	}{
		{"30s", 30 * time.Second},
		{"5m", 5 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"\"1.5s\"", 1500 * time.Millisecond},
	} {
		src := "name: t\nclasses: {a: {input: {dist: fixed, value: 1}, output: {dist: fixed, value: 1}}}\nphases: [{duration: " + c.text + ", rate: 1, mix: {a: 1}}]\n"
		s, err := Parse([]byte(src), "t")
		if err != nil {
			t.Fatalf("%s: %v", c.text, err)
		}
		if s.Phases[0].Duration != c.want {
			t.Errorf("%s: %v, want %v", c.text, s.Phases[0].Duration, c.want)
		}
	}
}

// TestAnchorsAndMerge: YAML anchors, aliases and merge keys work, and the
// merged keys are checked like any others.
func TestAnchorsAndMerge(t *testing.T) {
	src := `
name: t
classes:
  a: &chat
    input:  {dist: uniform, min: 10, max: 20}
    output: {dist: fixed, value: 5}
  b:
    <<: *chat
    output_cap: 3
phases:
  - {duration: 1s, rate: 1, mix: {a: 1, b: 1}}
`
	s, err := Parse([]byte(src), "t")
	if err != nil {
		t.Fatal(err)
	}
	if s.Classes["b"].OutputCap != 3 || *s.Classes["b"].Input.Max != 20 {
		t.Errorf("merged class: %+v", s.Classes["b"])
	}
	bad := strings.Replace(src, "output_cap: 3", "output_cap: 3\n    extra: 1", 1)
	if _, err := Parse([]byte(bad), "t"); err == nil || !strings.Contains(err.Error(), "classes.b.extra: unknown field") {
		t.Errorf("merged class with unknown field: %v", err)
	}
}

// TestMarshalRoundTrip checks that the yaml tags of Spec and the parser
// agree: marshalling a parsed built-in and parsing it again gives the same
// Spec.
func TestMarshalRoundTrip(t *testing.T) {
	for _, name := range Builtin() {
		s, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := yaml.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data, name+"-marshalled")
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, data)
		}
		if !reflect.DeepEqual(s, back) {
			t.Errorf("%s: round trip differs:\n%s", name, data)
		}
	}
}

func TestParseSizeLimit(t *testing.T) {
	data := make([]byte, MaxSpecBytes+1)
	if _, err := Parse(data, "big"); err == nil || !strings.Contains(err.Error(), "expected at most") {
		t.Errorf("Parse(huge) = %v", err)
	}
}

func TestPhaseAt(t *testing.T) {
	s, err := Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   float64
		want int
	}{{-1e-9, -1}, {0, 0}, {29.999999999, 0}, {30, 1}, {59.5, 1}, {60, 2}, {89.999999999, 2}, {90, -1}} {
		if got := s.PhaseAt(secs(c.at)); got != c.want {
			t.Errorf("PhaseAt(%vs) = %d, want %d", c.at, got, c.want)
		}
	}
}
