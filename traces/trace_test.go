package traces

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

func sha(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestOpenSpec(t *testing.T) {
	data, err := os.ReadFile("demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	odd := writeFile(t, dir, "demo.txt", string(data))
	for _, c := range []struct{ arg, format string }{
		{"demo", ""}, {"demo", FormatSpec}, {"demo.yaml", ""}, {odd, FormatSpec},
	} {
		tr := mustOpen(t, c.arg, c.format)
		if tr.Spec == nil || tr.Name != spec.Name || tr.Fleet != spec.Fleet || tr.SLO != spec.SLO || tr.Seed != spec.Seed {
			t.Errorf("%s: %+v", c.arg, tr)
		}
		if tr.Hash() != sha(data) {
			t.Errorf("%s: hash %s, want sha256 of demo.yaml", c.arg, tr.Hash())
		}
		if tr.MeanRate() != spec.MeanRate() || tr.Notes() != nil {
			t.Errorf("%s: MeanRate %v notes %q", c.arg, tr.MeanRate(), tr.Notes())
		}
		for _, scale := range []float64{1, 2.5} {
			got, err := tr.Generate(3, scale)
			if err != nil {
				t.Fatal(err)
			}
			if want := mustGenerate(t, spec, 3, scale); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: Generate differs from Spec.Generate", c.arg)
			}
			// Spec scaling keeps durations, so the bounds do not move.
			want := []event.Time{0, secs(30), secs(60), secs(90)}
			if b := tr.Bounds(scale); !reflect.DeepEqual(b, want) {
				t.Errorf("%s: Bounds(%v) = %v, want %v", c.arg, scale, b, want)
			}
		}
		if tr.Bounds(0) != nil || tr.Bounds(math.Inf(1)) != nil {
			t.Errorf("%s: Bounds of an invalid scale", c.arg)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	csv := writeFile(t, dir, "a.csv", azureHeaderLine+"\n"+azureOKRow+"\n")
	yml := writeFile(t, dir, "s.yaml", "name: x\n")
	txt := writeFile(t, dir, "a.txt", azureHeaderLine+"\n"+azureOKRow+"\n")
	missing := filepath.Join(dir, "missing.csv")
	for _, c := range []struct {
		arg, format, want string
	}{
		{"", "", `trace "": expected a built-in trace name`},
		{"demo", "yaml", `trace "demo": format "yaml": expected spec, mooncake, azure or empty (by extension)`},
		{"nosuch", "", `trace "nosuch": not a built-in trace, and extension "" is unknown: expected a built-in trace (`},
		{txt, "", `not a built-in trace, and extension ".txt" is unknown: expected a built-in trace`},
		{csv + "+x.txt", "", `a.csv+x.txt": "x.txt": not a built-in trace, and extension ".txt" is unknown`},
		{csv + "+", "", `path 2 of 2 is empty: expected paths joined by "+"`},
		{"+" + csv, "", `path 1 of 2 is empty`},
		{csv + "+" + yml, "", `s.yaml" is a spec: expected only imported traces (.jsonl, .csv) when joining paths with "+"`},
		{missing, "", "no such file or directory"},
		{csv + "+" + missing, "", "no such file or directory"},
		{"demo", FormatAzure, `trace "demo": open demo: no such file or directory`},
		{csv, FormatMooncake, "a.csv:1:1: invalid JSON: invalid character 'T' looking for beginning of value"},
		{yml, "", "s.yaml: "},
	} {
		_, err := Open(c.arg, c.format)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q, %q) = %v, want an error containing %q", c.arg, c.format, err, c.want)
		}
	}
	// A forced format reads any extension.
	tr := mustOpen(t, txt, FormatAzure)
	if tr.Name != "a" || len(mustReplay(t, tr, 1)) != 1 {
		t.Errorf("forced azure: %+v", tr)
	}
}

// concatFixture writes a.csv (arrivals at 0, 1, 2 s: mean gap 1 s) and
// b.jsonl (arrivals at 0.1, 0.4, 0.7 s: mean gap 0.3 s).
func concatFixture(t *testing.T) (a, b string) {
	dir := t.TempDir()
	a = writeFile(t, dir, "a.csv", azureHeaderLine+`
2023-11-16 18:00:00,10,1
2023-11-16 18:00:01,20,2
2023-11-16 18:00:02,30,3
`)
	b = writeFile(t, dir, "b.jsonl", `{"timestamp": 100, "input_length": 40, "output_length": 4}
{"timestamp": 700, "input_length": 60, "output_length": 6}
{"timestamp": 400, "input_length": 50, "output_length": 5}
`)
	return a, b
}

func TestConcatenation(t *testing.T) {
	a, b := concatFixture(t)
	tr := mustOpen(t, a+"+"+b, "")
	if tr.Name != "a+b" || tr.Seed != 1 || tr.Spec != nil {
		t.Errorf("fields %+v", tr)
	}
	want := []Request{
		{At: 0, Class: "a", InputTokens: 10, OutputTokens: 1},
		{At: secs(1), Class: "a", InputTokens: 20, OutputTokens: 2},
		{At: secs(2), Class: "a", InputTokens: 30, OutputTokens: 3},
		{At: secs(2.3), Class: "b", InputTokens: 40, OutputTokens: 4}, // one gap of b after a's last
		{At: secs(2.6), Class: "b", InputTokens: 50, OutputTokens: 5},
		{At: secs(2.9), Class: "b", InputTokens: 60, OutputTokens: 6},
	}
	if got := mustReplay(t, tr, 1); !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
	// b starts at its first arrival; the trace ends one gap of b after
	// its last arrival.
	if got, w := tr.Bounds(1), []event.Time{0, secs(2.3), secs(3.2)}; !reflect.DeepEqual(got, w) {
		t.Errorf("Bounds(1) = %v, want %v", got, w)
	}
	if got, w := tr.MeanRate(), 6/3.2; math.Abs(got-w) > 1e-12 {
		t.Errorf("MeanRate = %v, want %v", got, w)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if tr.Hash() != sha(ab, bb) {
		t.Errorf("hash is not the sha256 of both files in order")
	}
	if other := mustOpen(t, b+"+"+a, ""); other.Hash() == tr.Hash() || other.Name != "b+a" {
		t.Errorf("b+a: name %s, same hash", other.Name)
	}
	// b then a: a starts one gap of a (1 s) after b's last arrival (0.6 s).
	ba := mustReplay(t, mustOpen(t, b+"+"+a, ""), 1)
	if ba[3].At != secs(1.6) || ba[3].Class != "a" {
		t.Errorf("b+a: %v", ba)
	}
	// A file may be repeated.
	aa := mustOpen(t, a+"+"+a, "")
	if got, w := aa.Bounds(1), []event.Time{0, secs(3), secs(6)}; !reflect.DeepEqual(got, w) {
		t.Errorf("a+a Bounds(1) = %v, want %v", got, w)
	}
}

func TestScaling(t *testing.T) {
	a, b := concatFixture(t)
	tr := mustOpen(t, a+"+"+b, "")
	base := mustReplay(t, tr, 1)
	for _, scale := range []float64{2, 0.5, 3, 1e-3, 1.7} {
		got := mustReplay(t, tr, scale)
		for i := range got {
			if w := event.Time(math.Round(float64(base[i].At) / scale)); got[i].At != w {
				t.Errorf("scale %v: request %d at %v, want %v", scale, i, got[i].At, w)
			}
			r := got[i]
			r.At = base[i].At
			if r != base[i] {
				t.Errorf("scale %v: request %d changed beyond time: %+v", scale, i, got[i])
			}
		}
		b1, bs := tr.Bounds(1), tr.Bounds(scale)
		for i := range b1 {
			if w := event.Time(math.Round(float64(b1[i]) / scale)); bs[i] != w {
				t.Errorf("scale %v: bound %d %v, want %v", scale, i, bs[i], w)
			}
		}
		// The offered rate scales: N over the scaled span.
		rate := float64(len(got)) / bs[len(bs)-1].Seconds()
		if math.Abs(rate-scale*tr.MeanRate()) > 1e-9*rate {
			t.Errorf("scale %v: rate %v, want %v", scale, rate, scale*tr.MeanRate())
		}
	}
	// The seed is ignored.
	g1, _ := tr.Generate(1, 2)
	g2, _ := tr.Generate(99, 2)
	if !reflect.DeepEqual(g1, g2) {
		t.Error("seed changed an imported trace")
	}
	// Huge scales squeeze time but keep phases apart and requests inside.
	for _, scale := range []float64{1e9, 1e12, 1e300} {
		mustReplay(t, tr, scale)
	}
	for _, scale := range []float64{0, -1, math.NaN(), math.Inf(1), 1e-12} {
		if _, err := tr.Generate(1, scale); err == nil {
			t.Errorf("scale %v accepted", scale)
		}
		if tr.Bounds(scale) != nil {
			t.Errorf("Bounds(%v) not nil", scale)
		}
	}
	if _, err := tr.Generate(1, 1e-12); err == nil || !strings.Contains(err.Error(), "trace a+b: scale 1e-12 stretches the trace to") {
		t.Errorf("tiny scale: %v", err)
	}
}

func TestImportDeterminism(t *testing.T) {
	a, b := concatFixture(t)
	arg := a + "+" + b
	t1, t2 := mustOpen(t, arg, ""), mustOpen(t, arg, "")
	r1, r2 := mustReplay(t, t1, 1.5), mustReplay(t, t2, 1.5)
	if !reflect.DeepEqual(r1, r2) || t1.Hash() != t2.Hash() || !reflect.DeepEqual(t1.Bounds(1.5), t2.Bounds(1.5)) {
		t.Fatal("two opens differ")
	}
	// Generate returns a fresh slice each call.
	r1[0].InputTokens = 999
	if again := mustReplay(t, t1, 1.5); again[0].InputTokens == 999 {
		t.Error("Generate shares its slice")
	}
}

func TestWindows(t *testing.T) {
	for _, c := range []struct {
		end  event.Time
		want int
	}{
		{secs(10), MinWindows},
		{WindowLength * 10, 10},
		{WindowLength*11 + 1, 12},
		{WindowLength * 12, 12},
		{3600 * event.Second * 3, MaxWindows},
		{event.Time(MaxDuration), MaxWindows},
		{1, 1},
		{7, 7},
	} {
		b := windows(c.end)
		if len(b) != c.want+1 || b[0] != 0 || b[len(b)-1] != c.end {
			t.Errorf("windows(%v) = %v: want %d windows", c.end, b, c.want)
			continue
		}
		for i := 1; i < len(b); i++ {
			if w := b[i] - b[i-1]; w < c.end/event.Time(c.want) || w > c.end/event.Time(c.want)+1 {
				t.Errorf("windows(%v): window %d is %v", c.end, i, w)
			}
		}
	}

	// A single file: one request a minute for an hour.
	var sb strings.Builder
	sb.WriteString(azureHeaderLine + "\n")
	for m := range 60 {
		sb.WriteString("2023-11-16 18:" + twoDigits(m) + ":00,100,10\n")
	}
	path := writeFile(t, t.TempDir(), "hour.csv", sb.String())
	tr := mustOpen(t, path, "")
	b := tr.Bounds(1)
	if len(b) != 13 || b[12] != 3600*event.Second || b[1] != 300*event.Second {
		t.Errorf("hour: %v, want 12 windows of 5 min", b)
	}
	if tr.MeanRate() != 1.0/60 {
		t.Errorf("hour: MeanRate %v", tr.MeanRate())
	}
	reqs := mustReplay(t, tr, 4)
	if b4 := tr.Bounds(4); b4[1] != 75*event.Second || reqs[59].At != 59*15*event.Second {
		t.Errorf("hour at scale 4: %v, last at %v", b4, reqs[59].At)
	}

	// A single request, or requests at one instant, get a 1 s gap.
	one := mustOpen(t, writeFile(t, t.TempDir(), "one.jsonl", okRow+"\n"), "")
	if b := one.Bounds(1); b[len(b)-1] != SingleSegmentGap || len(b) != MinWindows+1 || one.MeanRate() != 1 {
		t.Errorf("one request: %v, rate %v", b, one.MeanRate())
	}
	same := mustOpen(t, writeFile(t, t.TempDir(), "same.jsonl", okRow+"\n"+okRow+"\n"), "")
	if b := same.Bounds(1); b[len(b)-1] != SingleSegmentGap {
		t.Errorf("same instant: %v", b)
	}
	// Two requests 1 ns apart: a 1 ns gap, so a 2 ns trace in two windows.
	tiny := mustOpen(t, writeFile(t, t.TempDir(), "tiny.csv", azureHeaderLine+"\n2023-11-16 18:00:00,1,1\n2023-11-16 18:00:00.000000001,1,1\n"), "")
	if b := tiny.Bounds(1); !reflect.DeepEqual(b, []event.Time{0, 1, 2}) {
		t.Errorf("tiny: %v", b)
	}
	for _, scale := range []float64{0.5, 3, 1e6} {
		mustReplay(t, tiny, scale)
	}
}

func twoDigits(n int) string { return string([]byte{byte('0' + n/10), byte('0' + n%10)}) }

// TestShippedAzure loads the real Azure 2023 traces shipped in azure/.
func TestShippedAzure(t *testing.T) {
	type want struct {
		n          int
		span       float64 // seconds from first to last arrival
		first      Request
		second     event.Time
		hashPrefix string
	}
	files := map[string]want{
		"code": {8819, 3435.948, Request{At: 0, Class: "code", InputTokens: 4808, OutputTokens: 10},
			52_000_000, "54e9a6d2a4bd06ba"},
		"conv": {19366, 3501.722, Request{At: 0, Class: "conv", InputTokens: 374, OutputTokens: 44},
			4_314_579_000, "2f1e5b666d4e3055"},
	}
	opened := map[string]*Trace{}
	for name, w := range files {
		tr := mustOpen(t, "azure/"+name+".csv", "")
		opened[name] = tr
		reqs := mustReplay(t, tr, 1)
		if len(reqs) != w.n || reqs[0] != w.first || reqs[1].At != w.second {
			t.Errorf("%s: %d requests, first %+v, second at %d", name, len(reqs), reqs[0], reqs[1].At)
		}
		span := reqs[len(reqs)-1].At.Seconds()
		if math.Abs(span-w.span) > 0.001 {
			t.Errorf("%s: span %v, want %v", name, span, w.span)
		}
		// MeanRate is (N-1)/span: one mean gap per request.
		if got, want := tr.MeanRate(), float64(w.n-1)/span; math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: MeanRate %v, want %v", name, got, want)
		}
		if b := tr.Bounds(1); len(b) != 13 { // about an hour: 12 windows
			t.Errorf("%s: %d windows", name, len(b)-1)
		}
		if !strings.HasPrefix(tr.Hash(), w.hashPrefix) || len(tr.Notes()) != 0 {
			t.Errorf("%s: hash %s notes %q", name, tr.Hash(), tr.Notes())
		}
		t.Logf("%s: %d requests, span %.3f s, MeanRate %.4f req/s", name, len(reqs), span, tr.MeanRate())
	}
	both := mustOpen(t, "azure/code.csv+azure/conv.csv", "")
	reqs := mustReplay(t, both, 1)
	if len(reqs) != 8819+19366 || both.Name != "code+conv" {
		t.Fatalf("code+conv: %d requests, name %s", len(reqs), both.Name)
	}
	b := both.Bounds(1)
	if len(b) != 3 {
		t.Fatalf("code+conv bounds %v", b)
	}
	for i, r := range reqs {
		if want := []string{"code", "conv"}[min(i/8819, 1)]; r.Class != want {
			t.Fatalf("request %d: class %s", i, r.Class)
		}
	}
	convReqs := mustReplay(t, opened["conv"], 1)
	convGap := opened["conv"].Bounds(1)[12] - convReqs[len(convReqs)-1].At
	if b[1] != reqs[8818].At+convGap || reqs[8819].At != b[1] {
		t.Errorf("conv starts at %v, want code's last %v + conv gap %v", reqs[8819].At, reqs[8818].At, convGap)
	}
	if b[2]-b[1] != opened["conv"].Bounds(1)[12] {
		t.Errorf("code+conv bounds %v", b)
	}
	if got, want := both.MeanRate(), float64(len(reqs))/b[2].Seconds(); got != want {
		t.Errorf("code+conv MeanRate %v, want %v", got, want)
	}
	t.Logf("code+conv: %d requests, span %v, MeanRate %.4f req/s, bounds %v", len(reqs), b[2], both.MeanRate(), b)
}

// "fixed:IN:OUT" is a synthetic trace of fixed lengths (vllm bench
// serve's random dataset with range ratio 0): Poisson arrivals at 1 req/s
// for an hour; bad lengths name the part.
func TestFixedTrace(t *testing.T) {
	tr, err := Open("fixed:1024:128", "")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name != "fixed-1024-128" || tr.MeanRate() != 1 {
		t.Fatalf("trace %s at %v req/s", tr.Name, tr.MeanRate())
	}
	reqs, err := tr.Generate(7, 5)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(reqs); n < 17000 || n > 19000 {
		t.Errorf("%d requests at 5 req/s over an hour: expected about 18,000", n)
	}
	for _, r := range reqs {
		if r.InputTokens != 1024 || r.OutputTokens != 128 {
			t.Fatalf("request %+v: expected 1024 and 128 tokens", r)
		}
	}
	for arg, part := range map[string]string{"fixed:0:5": "IN", "fixed:5": "", "fixed:5:x": "OUT", "fixed:20000000:1": "IN"} {
		if _, err := Open(arg, ""); err == nil || part != "" && !strings.Contains(err.Error(), part+" ") || !strings.Contains(err.Error(), "expected fixed:IN:OUT") {
			t.Errorf("%s: %v: expected an error naming %s", arg, err, part)
		}
	}
}
