package report

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/journaltest"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var allFormats = []Format{FormatText, FormatMarkdown, FormatJSON, FormatCSV}

var goldenName = map[Format]string{FormatText: "fixture.txt", FormatMarkdown: "fixture.md", FormatJSON: "fixture.json", FormatCSV: "fixture.csv"}

func written(t *testing.T, r *Report, f Format) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := r.Write(&b, f); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func load(t *testing.T, dir string, opts Options) *Report {
	t.Helper()
	r, err := Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// loadedBothWays is a report loaded from a journal root or from its export.
type loadedBothWays struct {
	dir string
	rep *Report
}

// bothWays exports the journals under root to root/parquet (with eo) and
// loads the report from the journals and from the export (with opts),
// in that order: the two must agree on whatever a test checks.
func bothWays(t *testing.T, root string, eo journal.ExportOptions, opts Options) []loadedBothWays {
	t.Helper()
	out := filepath.Join(root, "parquet")
	if _, err := journal.ExportWith(root, out, eo); err != nil {
		t.Fatal(err)
	}
	return []loadedBothWays{{root, load(t, root, opts)}, {out, load(t, out, opts)}}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report/ -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (rerun with -update and review the diff):\n%s", path, firstDiff(want, got))
	}
}

// firstDiff shows the first differing line.
func firstDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + itoa(i+1) + ":\n want: " + a + "\n  got: " + b
		}
	}
	return "(same lines)"
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

func TestGolden(t *testing.T) {
	r := load(t, writeFixtureRoot(t), Options{})
	for _, f := range allFormats {
		golden(t, goldenName[f], written(t, r, f))
	}
}

// The golden fixture's numbers, checked by hand rather than by the golden
// files alone.
func TestFixtureNumbers(t *testing.T) {
	r := load(t, writeFixtureRoot(t), Options{})
	var names []string
	for _, x := range r.Runs {
		names = append(names, x.Run)
	}
	if want := []string{"adaptive@1", "aggregated@1", "oracle@1", "static-2P6D@1", "static-2P6D@2"}; !slices.Equal(names, want) {
		t.Fatalf("runs %v, want %v (sorted by arm, then rate)", names, want)
	}
	byName := map[string]*RunReport{}
	for i := range r.Runs {
		byName[r.Runs[i].Run] = &r.Runs[i]
	}
	s := byName["static-2P6D@1"]
	g := s.Groups
	if s.Offered != 31 || s.Completed != 26 || g.Qualified != 21 || g.AtCap != 1 || g.Missed != 4 ||
		g.MissTTFT != 1 || g.MissTPOT != 1 || g.MissShort != 1 || g.MissCancl != 1 || g.NotDone != 5 {
		t.Errorf("static-2P6D@1: %+v, groups %+v", s, g)
	}
	if s.Refused != 2 || s.Expired != 2 || s.Failed != 1 ||
		!slices.Equal(s.Refusals, []CauseCount{{"overload", 1}, {"prompt", 1}}) ||
		!slices.Equal(s.Expiries, []CauseCount{{"drain_limit", 1}, {"queue_timeout", 1}}) ||
		!slices.Equal(s.Failures, []CauseCount{{"engine_error", 1}}) {
		t.Errorf("causes: %+v %+v %+v", s.Refusals, s.Expiries, s.Failures)
	}
	// Span: first scheduled send (0) to the last end.
	if math.Abs(s.Goodput.SpanS-68.95) > 1e-9 || math.Abs(s.Goodput.RPS-21/s.Goodput.SpanS) > 1e-12 || s.Goodput.PerGPU == nil ||
		math.Abs(*s.Goodput.PerGPU-s.Goodput.RPS/8) > 1e-12 {
		t.Errorf("goodput %+v", s.Goodput)
	}
	if a := byName["adaptive@1"]; a.Goodput.PerGPU != nil || a.Moves != 5 || a.Thrash != 2 {
		t.Errorf("adaptive@1: per GPU %v (GPU count unknown), moves %d (want 5), thrash %d (want 2)", a.Goodput.PerGPU, a.Moves, a.Thrash)
	}
	// DistServe: only the oracle reaches 90% (101/111 at rate 1).
	for _, a := range r.Arms {
		if a.Arm == OracleArm {
			if a.DistServe == nil || *a.DistServe != 1 || a.DistServePerGPU == nil || *a.DistServePerGPU != 1.0/8 {
				t.Errorf("oracle: DistServe goodput %v per GPU %v, want 1 and 1/8", a.DistServe, a.DistServePerGPU)
			}
		} else if a.DistServe != nil {
			t.Errorf("arm %s: DistServe goodput %v, want none (attainment < 90%%)", a.Arm, *a.DistServe)
		}
	}
	// Lag of adaptive against the oracle (changes at 10 s to 5, 30 s to 1,
	// 45 s to 4; adaptive is 2, 4 from 12 s, 3 from 25 s, 5 from 50 s):
	// 2 s, never before 45 s (15 s, missed), 0.
	l := byName["adaptive@1"].Lag
	if l.Status != LagMeasured || l.OracleRun != "oracle@1" || !slices.Equal(l.Lags, []float64{2, 15, 0}) || l.Missed != 1 ||
		math.Abs(l.Mean-17.0/3) > 1e-9 || !slices.Equal(l.Targets, []int{5, 1, 4}) {
		t.Errorf("adaptive lag %+v", l)
	}
	// static:2P6D (always 2): 5 never reached before 30 s (20 s), 1 at once,
	// 4 never reached before its last end.
	l = byName["static-2P6D@1"].Lag
	if l.Lags[0] != 20 || l.Lags[1] != 0 || l.Missed != 2 {
		t.Errorf("static lag %+v", l)
	}
	if byName["static-2P6D@2"].Lag.Status != LagNoOracle || byName["aggregated@1"].Lag.Status != LagNoSplit ||
		byName["oracle@1"].Lag.Status != LagOracle {
		t.Error("lag statuses")
	}
	if r.HasReferences {
		t.Error("HasReferences without references")
	}
}

// The four groups are disjoint and sum to the offered requests, on the
// fixture and on random runs.
func TestGroupsSumToOffered(t *testing.T) {
	root := writeFixtureRoot(t)
	for seed := uint64(1); seed <= 4; seed++ {
		writeRandomRun(t, filepath.Join(root, "random-"+itoa(int(seed))), 300, seed)
	}
	r := load(t, root, Options{})
	for _, x := range r.Runs {
		g := x.Groups
		if g.Sum() != x.Offered || g.Qualified != x.Qualified ||
			g.MissTTFT+g.MissTPOT+g.MissShort+g.MissCancl != g.Missed ||
			g.NotDone != x.Refused+x.Expired+x.Failed || g.Qualified+g.AtCap+g.Missed != x.Completed {
			t.Errorf("%s: offered %d, completed %d, groups %+v", x.Run, x.Offered, x.Completed, g)
		}
	}
}

// nearestRank is the textbook definition: the smallest sample value v with
// at least p of the sample at or below v.
func nearestRank(xs []int64, p float64) float64 {
	for _, v := range xs {
		n := 0
		for _, w := range xs {
			if w <= v {
				n++
			}
		}
		if float64(n) >= p*float64(len(xs))-1e-9 {
			best := v
			for _, u := range xs { // the smallest such value
				m := 0
				for _, w := range xs {
					if w <= u {
						m++
					}
				}
				if u < best && float64(m) >= p*float64(len(xs))-1e-9 {
					best = u
				}
			}
			return float64(best) / 1e9
		}
	}
	return math.NaN()
}

// Percentiles equal a direct computation from the journal's rows.
func TestPercentiles(t *testing.T) {
	root := t.TempDir()
	writeRandomRun(t, filepath.Join(root, "r1"), 257, 11)
	writeRandomRun(t, filepath.Join(root, "r2"), 40, 12)
	r := load(t, root, Options{})
	for _, x := range r.Runs {
		jr, err := journal.Open(filepath.Join(root, x.Run))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := journal.Fold(jr)
		jr.Close()
		if err != nil {
			t.Fatal(err)
		}
		var ttft, tpot, wait []int64
		for i := range rows {
			row := &rows[i]
			if row.Terminal == event.KindFinish {
				ttft = append(ttft, int64(row.FirstToken-row.Scheduled))
				if row.OutputTokens >= 2 {
					tpot = append(tpot, int64((row.End-row.FirstToken)/event.Time(row.OutputTokens-1)))
				}
			}
			if row.Admit != event.Never {
				wait = append(wait, int64(row.Admit-row.Arrival))
			}
		}
		for _, c := range []struct {
			name string
			q    Quantiles
			xs   []int64
		}{{"ttft", x.TTFT, ttft}, {"tpot", x.TPOT, tpot}, {"queue", x.QueueWait, wait}} {
			if c.q.N != len(c.xs) {
				t.Errorf("%s %s: n %d, want %d", x.Run, c.name, c.q.N, len(c.xs))
			}
			for _, p := range []struct {
				p   float64
				got float64
			}{{0.50, c.q.P50}, {0.95, c.q.P95}, {0.99, c.q.P99}} {
				if want := nearestRank(c.xs, p.p); p.got != want {
					t.Errorf("%s %s p%g = %v, want %v", x.Run, c.name, 100*p.p, p.got, want)
				}
			}
		}
	}
	if got := percentile([]int64{10, 20, 30, 40}, 0.5); got != 20 {
		t.Errorf("p50 of 4 values = %d, want 20 (nearest rank)", got)
	}
	if got := percentile([]int64{7}, 0.99); got != 7 {
		t.Errorf("p99 of one value = %d", got)
	}
}

// Reading a journal and reading its Parquet export give the same report.
func TestJournalAndParquetAgree(t *testing.T) {
	root := writeFixtureRoot(t)
	writeRandomRun(t, filepath.Join(root, "random"), 500, 5)
	out := filepath.Join(t.TempDir(), "parquet")
	if _, err := journal.Export(root, out); err != nil {
		t.Fatal(err)
	}
	fromJournal, fromParquet := load(t, root, Options{}), load(t, out, Options{})
	for _, f := range allFormats {
		a, b := written(t, fromJournal, f), written(t, fromParquet, f)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: journal and Parquet reports differ:\n%s", f, firstDiff(a, b))
		}
	}
	// One run read alone.
	one := filepath.Join(root, "adaptive@1")
	if _, err := journal.Export(one, filepath.Join(t.TempDir(), "p1")); err != nil {
		t.Fatal(err)
	}
	if k, _, err := Detect(one); err != nil || k != InputJournalRun {
		t.Fatalf("Detect(run) = %v, %v", k, err)
	}
	if k, _, err := Detect(out); err != nil || k != InputParquet {
		t.Fatalf("Detect(export) = %v, %v", k, err)
	}
	if k, runs, err := Detect(root); err != nil || k != InputJournalRoot || len(runs) != 6 {
		t.Fatalf("Detect(root) = %v, %d runs, %v", k, len(runs), err)
	}
}

// The same journal gives byte-identical output and plots.
func TestDeterminism(t *testing.T) {
	root := writeFixtureRoot(t)
	a, b := load(t, root, Options{}), load(t, root, Options{})
	for _, f := range allFormats {
		if !bytes.Equal(written(t, a, f), written(t, b, f)) {
			t.Errorf("%s output differs between two loads", f)
		}
	}
	rate, ok := a.DefaultPlotRate()
	if !ok {
		t.Fatal("no plot rate")
	}
	d1, d2 := t.TempDir(), t.TempDir()
	f1, err := a.Plot(d1, rate)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := b.Plot(d2, rate)
	if err != nil {
		t.Fatal(err)
	}
	if len(f1) != 10 || len(f2) != 10 {
		t.Fatalf("plot files %v", f1)
	}
	for i := range f1 {
		x, _ := os.ReadFile(f1[i])
		y, _ := os.ReadFile(f2[i])
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s: %d and %d bytes, not byte-identical", filepath.Base(f1[i]), len(x), len(y))
		}
	}
}

func TestPlotRate(t *testing.T) {
	r := load(t, writeFixtureRoot(t), Options{})
	// No non-oracle arm reaches 50% at rate 2 (static:2P6D, with slow
	// first tokens, qualifies about a third): the
	// default is the highest rate where one does.
	if v, ok := r.DefaultPlotRate(); !ok || v != 1 {
		t.Fatalf("DefaultPlotRate = %v %v, want 1", v, ok)
	}
	_, err := r.Plot(t.TempDir(), 7)
	if _, isRate := err.(*RateError); !isRate {
		t.Fatalf("Plot at a rate not swept: %v", err)
	}
	if _, err := r.Plot(t.TempDir(), 2); err != nil {
		t.Fatalf("Plot at rate 2 (one arm, no oracle): %v", err)
	}
}

func TestSLOOverride(t *testing.T) {
	root := writeFixtureRoot(t)
	r := load(t, root, Options{TTFTSLO: 2e9, TPOTSLO: 3e8})
	for _, x := range r.Runs {
		if x.TTFTSLO != 2 || x.TPOTSLO != 0.3 {
			t.Fatalf("%s: SLOs %v %v", x.Run, x.TTFTSLO, x.TPOTSLO)
		}
	}
	s := r.Runs[len(r.Runs)-2] // static-2P6D@1
	// The TTFT and TPOT misses now qualify.
	if s.Run != "static-2P6D@1" || s.Qualified != 23 || s.Groups.Missed != 2 {
		t.Errorf("%s with looser SLOs: qualified %d, groups %+v", s.Run, s.Qualified, s.Groups)
	}
	if r.SLOOverride != "ttft,tpot" || !strings.Contains(string(written(t, r, FormatText)), "set on the command line") {
		t.Error("override not reported")
	}
}

func TestF1(t *testing.T) {
	cases := []struct {
		resp, ref string
		want      float64
	}{
		{"the eiffel tower!", "The Eiffel Tower", 1},
		{"paris", "Paris, France", 2.0 / 3},
		{"green apple", "a red apple", 0.5},
		{"an elephant", "blue whale", 0},
		{"", "", 1},
		{"the", "a", 1}, // both empty after normalisation
		{"x", "", 0},
		{"a a b", "a b b", 2.0 / 3},             // multiset overlap: "b" x1 after articles go; a is an article
		{"cat cat dog", "cat dog dog", 2.0 / 3}, // shared: cat, dog
		{"Don't stop", "dont stop", 1},
	}
	for _, c := range cases {
		if got := F1(c.resp, c.ref); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("F1(%q, %q) = %v, want %v", c.resp, c.ref, got, c.want)
		}
	}
}

func TestQuality(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "quality@1")
	writeQualityRun(t, dir)
	r := load(t, dir, Options{})
	if !r.HasReferences || len(r.Runs) != 1 {
		t.Fatalf("HasReferences %v, %d runs", r.HasReferences, len(r.Runs))
	}
	q := r.Runs[0].Quality
	if len(q) != 3 || q[0].Class != "chat" || q[1].Class != "qa" || q[2].Class != AllClasses {
		t.Fatalf("quality rows %+v", q)
	}
	near := func(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-12 }
	sum := 1 + 2.0/3 + 0.5 + 0
	if qa := q[1]; qa.WithReference != 5 || qa.Scored != 4 || qa.Unscored != 0 ||
		!near(qa.CompletedF1, sum/4) || !near(qa.AllOfferF1, sum/5) || !near(qa.SLOF1, (1+2.0/3)/5) {
		t.Errorf("qa %+v", qa)
	}
	if chat := q[0]; chat.WithReference != 1 || chat.Scored != 0 || chat.Unscored != 1 || chat.CompletedF1 != nil {
		t.Errorf("chat %+v", chat)
	}
	if all := q[2]; all.WithReference != 6 || all.Scored != 4 || !near(all.AllOfferF1, sum/6) || !near(all.SLOF1, (1+2.0/3)/6) {
		t.Errorf("all %+v", all)
	}
	text := written(t, r, FormatText)
	golden(t, "quality.txt", text)
	// Without references the section is left out.
	if bytes.Contains(written(t, load(t, writeFixtureRoot(t), Options{}), FormatText), []byte("Answer quality")) {
		t.Error("quality section printed without references")
	}
}

func TestBadInputs(t *testing.T) {
	cases := map[string]struct {
		dir  func(t *testing.T) string
		want string
	}{
		"missing": {func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, "no such directory"},
		"a file": {func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f")
			os.WriteFile(p, []byte("x"), 0o644)
			return p
		}, "not a directory"},
		"empty": {func(t *testing.T) string { return t.TempDir() }, "empty directory"},
		"garbage": {func(t *testing.T) string {
			d := t.TempDir()
			os.WriteFile(filepath.Join(d, "junk.bin"), bytes.Repeat([]byte{0xde, 0xad}, 500), 0o644)
			os.Mkdir(filepath.Join(d, "sub"), 0o755)
			return d
		}, "no journal runs"},
		"garbage parquet": {func(t *testing.T) string {
			d := t.TempDir()
			os.WriteFile(filepath.Join(d, journal.RunsFile), []byte("PAR1 not really"), 0o644)
			os.WriteFile(filepath.Join(d, journal.RequestsFile), []byte("PAR1 not really"), 0o644)
			return d
		}, journal.ManifestFile},
		"corrupt store": {func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "run")
			writeQualityRun(t, d)
			ents, _ := os.ReadDir(filepath.Join(d, "events"))
			for _, e := range ents {
				os.WriteFile(filepath.Join(d, "events", e.Name()), bytes.Repeat([]byte("garbage!"), 64), 0o644)
			}
			return d
		}, "event store"},
		"bad marker in a root": {func(t *testing.T) string {
			root := t.TempDir()
			writeQualityRun(t, filepath.Join(root, "good"))
			os.Mkdir(filepath.Join(root, "bad"), 0o755)
			os.WriteFile(filepath.Join(root, "bad", "JOURNAL"), []byte("nonsense"), 0o644)
			return root
		}, "bad"},
		"crashed run": {func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "run")
			f := newFixtureRun(t, d, fixtureMeta("static:2P6D", 1, 8))
			f.rec(event.Record{At: 0, Kind: event.KindArrival, Req: 1, Tokens: 10, Want: 5})
			f.close()
			return d
		}, "never ended"},
		"newer schema": {func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "run")
			writeQualityRun(t, d)
			journaltest.BumpSchema(t, d)
			return d
		}, "upgrade"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := c.dir(t)
			r, err := Load(dir, Options{})
			if err == nil {
				t.Fatalf("Load accepted it: %d runs", len(r.Runs))
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			if name == "newer schema" && (strings.Contains(err.Error(), "damaged") || !errors.Is(err, event.ErrNewerSchema)) {
				t.Errorf("a newer schema reported as damage: %v", err) // the journal is whole
			}
			t.Logf("%v", err)
		})
	}
}

func TestFormats(t *testing.T) {
	for in, want := range map[string]Format{"": FormatText, "text": FormatText, "Markdown": FormatMarkdown, "md": FormatMarkdown, "json": FormatJSON, "csv": FormatCSV} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("ParseFormat(xml) accepted")
	}
	// CSV: one row per run plus the header, every row as wide as the header.
	r := load(t, writeFixtureRoot(t), Options{})
	lines := strings.Split(strings.TrimSpace(string(written(t, r, FormatCSV))), "\n")
	if len(lines) != 1+len(r.Runs) {
		t.Fatalf("%d CSV lines for %d runs", len(lines), len(r.Runs))
	}
}

// A run with no requests (only opening roles) still reports and plots.
func TestEmptyRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "idle@1")
	f := newFixtureRun(t, dir, fixtureMeta("static:2P6D", 1, 8))
	f.roles(2, 6, false)
	f.close()
	r := load(t, dir, Options{})
	if len(r.Runs) != 1 || r.Runs[0].Offered != 0 || r.Runs[0].Goodput.RPS != 0 || r.Runs[0].TTFT.N != 0 {
		t.Fatalf("empty run: %+v", r.Runs)
	}
	for _, f := range allFormats {
		if len(written(t, r, f)) == 0 {
			t.Errorf("%s: no output", f)
		}
	}
	if !strings.Contains(string(written(t, r, FormatJSON)), `"p50": null`) {
		t.Error("empty percentiles are not null in JSON")
	}
	if files, err := r.Plot(t.TempDir(), 1); err != nil || len(files) != 10 {
		t.Fatalf("plots of an empty run: %v %v", files, err)
	}
}

// TestDamage: every kind of damage to a journal or an export is an error
// naming the run (or file) and the damage, never a smaller report; with
// Options.Partial too (partial accepts runs cut short, not damage).
func TestDamage(t *testing.T) {
	for _, d := range journaltest.Damages {
		for _, partial := range []bool{false, true} {
			if partial && d.Name == "writer killed" {
				continue // a killed writer's run is what Partial reads
			}
			t.Run(fmt.Sprintf("%s/partial=%v", d.Name, partial), func(t *testing.T) {
				root := t.TempDir()
				writeQualityRun(t, filepath.Join(root, "a-good"))
				dir := filepath.Join(root, "b-hurt")
				writeQualityRun(t, dir)
				d.Do(t, dir)
				r, err := Load(root, Options{Partial: partial})
				if err == nil {
					t.Fatalf("Load accepted it: %d runs", len(r.Runs))
				}
				if !strings.Contains(err.Error(), d.Want) || !strings.Contains(err.Error(), "b-hurt") {
					t.Fatalf("Load: %v\nwant an error naming b-hurt and containing %q", err, d.Want)
				}
			})
		}
	}
	for _, d := range journaltest.ExportDamages {
		t.Run(d.Name, func(t *testing.T) {
			root := t.TempDir()
			writeQualityRun(t, filepath.Join(root, "a"))
			out := filepath.Join(root, "parquet")
			if _, err := journal.Export(root, out); err != nil {
				t.Fatal(err)
			}
			d.Do(t, out)
			if r, err := Load(out, Options{Partial: true}); err == nil || !strings.Contains(err.Error(), d.Want) {
				t.Fatalf("Load: %v (%v), want %q", err, r, d.Want)
			}
		})
	}
}

// TestPartialRun: a run marked partial is refused, and scored with
// Options.Partial, every table labelled partial, from the journal and from
// its export alike.
func TestPartialRun(t *testing.T) {
	root := t.TempDir()
	writeQualityRun(t, filepath.Join(root, "a-whole"))
	w, err := journal.Create(filepath.Join(root, "b-cut"), fixtureMeta("static:2P6D", 1, 8), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(&event.Record{At: 0, Kind: event.KindArrival, Req: 1, Tokens: 10, Want: 5, Inst: event.NoInstance, Peer: event.NoInstance})
	if err := w.ClosePartial("interrupted"); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(root, Options{}); err == nil || !strings.Contains(err.Error(), "b-cut") || !strings.Contains(err.Error(), "marked partial (interrupted)") {
		t.Fatalf("Load of a partial run without Partial: %v", err)
	}
	for _, x := range bothWays(t, root, journal.ExportOptions{Partial: true}, Options{Partial: true}) {
		dir, rep := x.dir, x.rep
		if !rep.Partial {
			t.Fatalf("%s: Report.Partial is false", dir)
		}
		var cut *RunReport
		for i := range rep.Runs {
			if rep.Runs[i].Run == "b-cut" {
				cut = &rep.Runs[i]
			}
		}
		if cut == nil || cut.Partial != "interrupted" || cut.Offered != 1 || cut.Groups.NotDone != 1 {
			t.Fatalf("%s: partial run: %+v", dir, cut)
		}
		var b strings.Builder
		if err := rep.Write(&b, FormatText); err != nil {
			t.Fatal(err)
		}
		text := b.String()
		for _, title := range []string{"Outcomes", "Latency of completed requests", "Goodput"} {
			if !strings.Contains(text, title+" [partial]") {
				t.Errorf("%s: table %q not labelled partial:\n%s", dir, title, text)
			}
		}
		if !strings.Contains(text, "PARTIAL: run b-cut is not whole (interrupted)") {
			t.Errorf("%s: no PARTIAL line:\n%s", dir, text)
		}
		if !strings.Contains(text, "not completed also counts the requests still open") {
			t.Errorf("%s: no note on open requests under Outcomes:\n%s", dir, text)
		}
	}
}

// TestPartialRunFloorsGoodput: a partial run whose requests all
// qualified still counts as failing in the DistServe goodput (requests
// never offered cannot miss), so the goodput stops below it and says why.
func TestPartialRunFloorsGoodput(t *testing.T) {
	root := t.TempDir()
	for _, rate := range []float64{1, 2, 3} {
		f := newFixtureRun(t, filepath.Join(root, fmt.Sprintf("r%g", rate)), fixtureMeta("static:2P6D", rate, 8))
		f.roles(2, 6, false)
		for i := 0; i < 10; i++ {
			f.req(reqSpec{class: "chat", sched: float64(i), ttft: 0.2, dur: 0.5, in: 100, want: 10, out: 10, term: event.KindFinish, cause: event.CauseStop})
		}
		if rate == 2 {
			if err := f.w.ClosePartial("interrupted"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		f.close()
	}
	for _, x := range bothWays(t, root, journal.ExportOptions{Partial: true}, Options{Partial: true}) {
		if len(x.rep.Arms) != 1 {
			t.Fatalf("%s: arms %+v", x.dir, x.rep.Arms)
		}
		a := x.rep.Arms[0]
		for _, r := range x.rep.Runs {
			if r.Attainment != 1 {
				t.Fatalf("%s: run %s attainment %v, want 1 (the fixture's requests all qualify)", x.dir, r.Run, r.Attainment)
			}
		}
		if a.DistServe == nil || *a.DistServe != 1 || len(a.PartialRates) != 1 || a.PartialRates[0] != 2 {
			t.Fatalf("%s: DistServe %v, partial rates %v; want 1 req/s, [2]", x.dir, fmtPtr(a.DistServe, 2), a.PartialRates)
		}
		var b strings.Builder
		if err := x.rep.Write(&b, FormatText); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "static:2P6D: the run at 2 req/s is partial and counts as failing here") {
			t.Errorf("%s: no note on the partial rate:\n%s", x.dir, b.String())
		}
	}
}

// TestDegradedLiveRun: a live run whose load generator fell behind its
// schedule is flagged, with its p99 lag, from the journal and from its
// export alike; a run on schedule is not.
func TestDegradedLiveRun(t *testing.T) {
	root := t.TempDir()
	writeQualityRun(t, filepath.Join(root, "a-sim"))
	m := fixtureMeta("static:2P6D", 2, 8)
	m.Driver, m.Planned, m.Sent, m.LagP50, m.LagP90, m.LagP99, m.Degraded = "live", 1, 1, 0.2, 0.5, 0.75, true
	f := newFixtureRun(t, filepath.Join(root, "b-late"), m)
	f.roles(2, 6, false)
	f.req(reqSpec{class: "qa", sched: 0, ttft: 0.2, dur: 0.5, in: 100, want: 10, out: 6, term: event.KindFinish, cause: event.CauseStop})
	f.close()
	for _, both := range bothWays(t, root, journal.ExportOptions{}, Options{}) {
		dir, rep := both.dir, both.rep
		for _, x := range rep.Runs {
			if want := x.Run == "b-late"; x.Degraded != want || (want && x.LoadLagP99 != 0.75) || (!want && x.LoadLagP99 != 0) {
				t.Errorf("%s: run %s: degraded %v, p99 lag %v", dir, x.Run, x.Degraded, x.LoadLagP99)
			}
		}
		var b strings.Builder
		if err := rep.Write(&b, FormatText); err != nil {
			t.Fatal(err)
		}
		text := b.String()
		if !strings.Contains(text, "DEGRADED: run b-late's load generator fell behind its schedule (p99 lag 0.750 s") {
			t.Errorf("%s: no DEGRADED line:\n%s", dir, text)
		}
		if strings.Contains(text, "run a-sim's load generator") {
			t.Errorf("%s: a simulation flagged degraded:\n%s", dir, text)
		}
	}
}

// TestPreemptionsReported: the report counts KV-capacity preemptions per
// run, from the journal and from its export alike.
func TestPreemptionsReported(t *testing.T) {
	root := t.TempDir()
	w, err := journal.Create(filepath.Join(root, "a-kv"), fixtureMeta("static:2P6D", 1, 8), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(kind event.Kind, at event.Time, inst event.Instance) {
		w.Record(&event.Record{At: at, Kind: kind, Req: 1, Tokens: 10, Want: 5, Inst: inst, Peer: event.NoInstance, Cause: event.CauseNone})
	}
	ms := event.Millisecond
	rec(event.KindArrival, 0, event.NoInstance)
	rec(event.KindAdmit, ms, 0)
	rec(event.KindPrefillStart, ms, 0)
	rec(event.KindPrefillDone, 5*ms, 0)
	rec(event.KindDecodeStart, 5*ms, 0)
	rec(event.KindPreempt, 8*ms, 0)
	rec(event.KindPreempt, 9*ms, 0)
	w.Record(&event.Record{At: 20 * ms, Kind: event.KindFinish, Req: 1, Tokens: 5, Inst: 0, Peer: event.NoInstance, Cause: event.CauseStop})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, x := range bothWays(t, root, journal.ExportOptions{}, Options{}) {
		dir, rep := x.dir, x.rep
		if len(rep.Runs) != 1 || rep.Runs[0].Preemptions != 2 || rep.Runs[0].Completed != 1 {
			t.Fatalf("%s: runs %+v, want one with 2 preemptions", dir, rep.Runs)
		}
	}
}

// TestSpilledReported: the report counts spilled prompts (admit records
// with cause spilled) per run, from the journal and from its export alike.
func TestSpilledReported(t *testing.T) {
	root := t.TempDir()
	w, err := journal.Create(filepath.Join(root, "a-spill"), fixtureMeta("adaptive", 1, 8), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := event.Millisecond
	for id := event.RequestID(1); id <= 3; id++ {
		cause := event.CauseNone
		inst := event.Instance(0)
		if id != 2 {
			cause, inst = event.CauseSpilled, 5 // a decode engine absorbs the prompt
		}
		rec := func(kind event.Kind, at event.Time, c event.Cause) {
			w.Record(&event.Record{At: at, Kind: kind, Req: id, Tokens: 10, Want: 5, Inst: inst, Peer: event.NoInstance, Cause: c})
		}
		at := event.Time(id) * ms
		rec(event.KindArrival, at, event.CauseNone)
		rec(event.KindAdmit, at+ms, cause)
		rec(event.KindPrefillStart, at+ms, event.CauseNone)
		rec(event.KindPrefillDone, at+5*ms, event.CauseNone)
		rec(event.KindDecodeStart, at+5*ms, event.CauseNone)
		w.Record(&event.Record{At: at + 20*ms, Kind: event.KindFinish, Req: id, Tokens: 5, Inst: inst, Peer: event.NoInstance, Cause: event.CauseStop})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, x := range bothWays(t, root, journal.ExportOptions{}, Options{}) {
		dir, rep := x.dir, x.rep
		if len(rep.Runs) != 1 || rep.Runs[0].Spilled != 2 || rep.Runs[0].Completed != 3 {
			t.Fatalf("%s: runs %+v, want one with 2 spilled of 3 completed", dir, rep.Runs)
		}
	}
}

// An adaptive run that aggregates for a while (every engine relabelled
// mixed by moves, issue 10's twenty-fifth round) keeps its split line and
// its adaptation lag: only an aggregated opening means no split.
func TestAggregatedSpellKeepsTheSplit(t *testing.T) {
	root := t.TempDir()
	P, D, M := event.RolePrefill, event.RoleDecode, event.RoleMixed
	f := newFixtureRun(t, filepath.Join(root, "adaptive@1"), fixtureMeta("adaptive", 1, 8))
	f.roles(4, 4, false)
	for i := range 8 {
		from := P
		if i >= 4 {
			from = D
		}
		f.rec(event.Record{At: sec(20), Kind: event.KindRoleMove, Inst: event.Instance(i), From: from, To: M, Cause: event.CauseController, Text: "aggregated"})
	}
	for i := range 8 {
		to := D
		if i < 4 {
			to = P
		}
		f.rec(event.Record{At: sec(40), Kind: event.KindRoleMove, Inst: event.Instance(i), From: M, To: to, Cause: event.CauseController, Text: "back"})
	}
	f.outcomes(20, 1)
	f.close()
	f = newFixtureRun(t, filepath.Join(root, "oracle@1"), fixtureMeta("oracle", 1, 8))
	f.roles(4, 4, false)
	f.move(sec(30), 1, D, P)
	f.outcomes(20, 1)
	f.close()

	r := load(t, root, Options{})
	for _, run := range r.Runs {
		if run.Arm != "adaptive" {
			continue
		}
		if run.Moves != 16 || run.Lag.Status != LagMeasured {
			t.Errorf("adaptive with an aggregated spell: %d moves, lag %+v; want 16 moves and a measured lag", run.Moves, run.Lag)
		}
		return
	}
	t.Fatal("no adaptive run")
}

// A hybrid fleet (hybrid:1P7M: one prefill engine, seven mixed) has a
// split, so its adaptation lag against the oracle is measured, not
// reported as "no split" as the aggregated arm's is.
func TestHybridLagMeasured(t *testing.T) {
	root := t.TempDir()
	f := newFixtureRun(t, filepath.Join(root, "oracle@1"), fixtureMeta("oracle", 1, 8))
	f.roles(2, 6, false)
	f.move(sec(10), 3, event.RoleDecode, event.RolePrefill)
	f.outcomes(20, 0.7)
	f.close()
	f = newFixtureRun(t, filepath.Join(root, "hybrid@1"), fixtureMeta("hybrid:1P7M", 1, 8))
	f.rec(event.Record{Kind: event.KindRoleMove, Inst: 0, From: event.RoleNone, To: event.RolePrefill, Text: "opening role"})
	for i := 1; i < 8; i++ {
		f.rec(event.Record{Kind: event.KindRoleMove, Inst: event.Instance(i), From: event.RoleNone, To: event.RoleMixed, Text: "opening role"})
	}
	f.outcomes(20, 0.7)
	f.close()
	r, err := Load(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range r.Runs {
		if run.Arm == "hybrid:1P7M" && run.Lag.Status != LagMeasured {
			t.Fatalf("hybrid:1P7M lag %+v: expected it measured against the oracle", run.Lag)
		}
	}
}

// TestMissingRunOfExportedRoot: a journal root whose own export lists a
// run that is no longer there as a journal (its directory deleted or
// emptied) is refused, never reported as a smaller whole; once exported
// again it reads.
func TestMissingRunOfExportedRoot(t *testing.T) {
	root := t.TempDir()
	writeQualityRun(t, filepath.Join(root, "a-run"))
	writeQualityRunAt(t, filepath.Join(root, "b-run"), 2)
	if _, err := journal.ExportWith(root, filepath.Join(root, "parquet"), journal.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(root, Options{}); err != nil {
		t.Fatalf("the whole root: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "b-run"))
	for _, e := range ents {
		os.RemoveAll(filepath.Join(root, "b-run", e.Name()))
	}
	if _, err := Load(root, Options{}); err == nil || !strings.Contains(err.Error(), "run b-run is in its export") {
		t.Fatalf("a run emptied: %v", err)
	}
	os.RemoveAll(filepath.Join(root, "b-run"))
	if _, err := Load(root, Options{}); err == nil || !strings.Contains(err.Error(), "run b-run is in its export") {
		t.Fatalf("a run deleted: %v", err)
	}
	if _, err := journal.ExportWith(root, filepath.Join(root, "parquet"), journal.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := Load(root, Options{}); err != nil || len(r.Runs) != 1 {
		t.Fatalf("exported again: %v", err)
	}
}

// An oracle that keeps one split gives no change to adapt to: the lag is
// undefined, never a perfect 0 s.
func TestLagWithoutOracleChange(t *testing.T) {
	root := t.TempDir()
	for _, arm := range []string{"oracle", "static:2P6D"} {
		f := newFixtureRun(t, filepath.Join(root, strings.ReplaceAll(arm, ":", "-")+"@1"), fixtureMeta(arm, 1, 8))
		f.roles(4, 4, false)
		f.outcomes(20, 1)
		f.close()
	}
	rep, err := Load(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range rep.Runs {
		if run.Arm == "static:2P6D" && (run.Lag.Status != LagNoChange || run.Lag.OracleRun != "oracle@1") {
			t.Fatalf("lag %+v: expected status %q", run.Lag, LagNoChange)
		}
	}
	var b strings.Builder
	if err := rep.Write(&b, FormatText); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "oracle@1 keeps one split") {
		t.Fatalf("no note:\n%s", b.String())
	}
}

// TestMissingRunOfCombination: narwhal-bench run writes each combination
// as DIR/runs (journals) beside DIR/parquet (their export). The report
// reads DIR or DIR/runs, and refuses either once a run is gone from runs/
// that the export beside it holds.
func TestMissingRunOfCombination(t *testing.T) {
	combo := t.TempDir()
	runs := filepath.Join(combo, "runs")
	writeQualityRun(t, filepath.Join(runs, "a-run"))
	writeQualityRunAt(t, filepath.Join(runs, "b-run"), 2)
	if _, err := journal.ExportWith(runs, filepath.Join(combo, "parquet"), journal.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(combo, "result.json"), []byte(`{"runs":[{"arm":"a"},{"arm":"b"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{combo, runs} {
		if r, err := Load(dir, Options{}); err != nil || len(r.Runs) != 2 {
			t.Fatalf("%s whole: %v", dir, err)
		}
	}
	os.RemoveAll(filepath.Join(runs, "b-run"))
	for _, dir := range []string{combo, runs} {
		if _, err := Load(dir, Options{}); err == nil || !strings.Contains(err.Error(), "run b-run is in its export") {
			t.Fatalf("%s with a run deleted: %v", dir, err)
		}
	}
	// Its export gone too: run's result.json still lists the runs.
	os.RemoveAll(filepath.Join(combo, "parquet"))
	for _, dir := range []string{combo, runs} {
		if _, err := Load(dir, Options{}); err == nil || !strings.Contains(err.Error(), "lists 2 runs, 1 are here") {
			t.Fatalf("%s with a run and the export deleted: %v", dir, err)
		}
	}
	// Without run's result.json, a directory named runs is no combination:
	// a parquet beside it is none of its business.
	os.Remove(filepath.Join(combo, "result.json"))
	if r, err := Load(runs, Options{}); err != nil || len(r.Runs) != 1 {
		t.Fatalf("a root named runs, no combination: %v", err)
	}
}

// TestCopiedRun: a run directory copied over another (two names, one
// journal) is refused, not reported as the same run twice with the other
// run lost.
func TestCopiedRun(t *testing.T) {
	root := t.TempDir()
	writeQualityRun(t, filepath.Join(root, "static-2P6D@1"))
	writeQualityRun(t, filepath.Join(root, "static-2P6D@2")) // the @1 run, byte for byte
	if _, err := Load(root, Options{}); err == nil || !strings.Contains(err.Error(), "hold the same journal") {
		t.Fatalf("a copied run: %v", err)
	}
	other := t.TempDir()
	writeQualityRun(t, filepath.Join(other, "static-2P6D@1"))
	writeQualityRunAt(t, filepath.Join(other, "static-2P6D@2"), 2)
	if r, err := Load(other, Options{}); err != nil || len(r.Runs) != 2 {
		t.Fatalf("two runs of their own: %v", err)
	}
}

// A serve journal has no trace and no rate (its clients sent what they
// sent): the header says so rather than "rates 0 req/s" and "trace ;".
func TestServeJournalHeader(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "serve")
	m := fixtureMeta("adaptive", 0, 8)
	m.Driver, m.Trace = "live", ""
	f := newFixtureRun(t, dir, m)
	f.roles(4, 4, false)
	f.req(reqSpec{class: "qa", sched: 0, ttft: 0.2, dur: 0.5, in: 100, want: 10, out: 6, term: event.KindFinish, cause: event.CauseStop})
	f.close()
	r, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.Write(&b, FormatText); err != nil {
		t.Fatal(err)
	}
	head := b.String()[:min(400, b.Len())]
	if !strings.Contains(head, "no rate (a serve journal") || !strings.Contains(head, "trace none;") || strings.Contains(head, "rates 0 req/s") {
		t.Fatalf("header:\n%s", head)
	}
}

// The plots say what the tables say: a partial report's prefill-share
// figure and each partial run's panel are marked [partial]; runs judged
// by different SLOs get one SLO line each in the CDFs, naming their arms.
func TestPlotsPartialAndSLOs(t *testing.T) {
	r := load(t, writeFixtureRoot(t), Options{})
	var at1 []int
	for k, x := range r.Runs {
		if x.Rate == 1 {
			at1 = append(at1, k)
		}
	}
	if len(at1) < 2 {
		t.Fatalf("the fixture has %d runs at rate 1: expected two arms or more", len(at1))
	}
	r.Partial = true
	r.Runs[at1[0]].Partial = "cut short"
	r.Runs[at1[1]].TTFTSLO *= 2
	dir := t.TempDir()
	if _, err := r.Plot(dir, 1); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if s := read("prefill_share.svg"); strings.Count(s, "[partial]") < 2 {
		t.Errorf("prefill_share.svg marks [partial] %d times: expected the figure's title and the partial run's panel", strings.Count(s, "[partial]"))
	}
	if s := read("attainment.svg"); !strings.Contains(s, "ringed: partial run") {
		t.Error("attainment.svg does not mark the partial run's point")
	}
	if s := read("ttft_cdf.svg"); strings.Count(s, "TTFT SLO") != 2 || !strings.Contains(s, r.Runs[at1[1]].Arm+")") {
		t.Errorf("ttft_cdf.svg has %d SLO lines' labels: expected 2, one naming %s", strings.Count(s, "TTFT SLO"), r.Runs[at1[1]].Arm)
	}
}
