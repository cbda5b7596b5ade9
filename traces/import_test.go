package traces

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// writeFile writes content to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustOpen opens arg and checks the invariants of every trace.
func mustOpen(t testing.TB, arg, format string) *Trace {
	t.Helper()
	tr, err := Open(arg, format)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// mustReplay generates an imported trace at scale and checks it.
func mustReplay(t testing.TB, tr *Trace, scale float64) []Request {
	t.Helper()
	reqs, err := tr.Generate(1, scale)
	if err != nil {
		t.Fatal(err)
	}
	checkImported(t, tr, reqs, scale)
	return reqs
}

// checkImported checks what every replay of an imported trace satisfies:
// sorted times from 0, lengths in range, prefixes within the prompt, and
// every request inside a phase of Bounds(scale), phases in order.
func checkImported(t testing.TB, tr *Trace, reqs []Request, scale float64) {
	t.Helper()
	b := tr.Bounds(scale)
	if len(b) < 2 || b[0] != 0 {
		t.Fatalf("Bounds(%v) = %v", scale, b)
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			t.Fatalf("Bounds(%v) not increasing: %v", scale, b)
		}
	}
	if len(reqs) == 0 || reqs[0].At != 0 {
		t.Fatalf("first request not at 0: %d requests", len(reqs))
	}
	for i, r := range reqs {
		if i > 0 && r.At < reqs[i-1].At {
			t.Fatalf("request %d at %v before request %d at %v", i, r.At, i-1, reqs[i-1].At)
		}
		if r.At >= b[len(b)-1] {
			t.Fatalf("request %d at %v at or after the end %v", i, r.At, b[len(b)-1])
		}
		if r.InputTokens < 1 || r.OutputTokens < 1 || r.InputTokens > MaxTokens || r.OutputTokens > MaxTokens || r.OutputCap != 0 {
			t.Fatalf("request %d: %+v", i, r)
		}
		if (r.PrefixGroup == 0) != (r.PrefixTokens == 0) || r.PrefixGroup < 0 ||
			r.PrefixTokens < 0 || r.PrefixTokens > r.InputTokens-1 {
			t.Fatalf("request %d: prefix %d/%d of input %d", i, r.PrefixGroup, r.PrefixTokens, r.InputTokens)
		}
		if (r.CacheGroup == 0) != (r.CacheTokens == 0) || r.CacheGroup < 0 || r.CacheTokens < 0 ||
			r.CacheTokens > r.InputTokens-1 || r.CacheTokens%MooncakeBlockTokens != 0 && r.CacheTokens != r.InputTokens-1 ||
			r.CacheGroup != 0 && r.CacheGroup == r.PrefixGroup && r.CacheTokens != r.PrefixTokens {
			t.Fatalf("request %d: leaves %d/%d cached, prefix %d/%d, of input %d", i, r.CacheGroup, r.CacheTokens, r.PrefixGroup, r.PrefixTokens, r.InputTokens)
		}
	}
}

func TestMooncakeRoundTrip(t *testing.T) {
	want := []Request{
		{At: 0, InputTokens: 6955, OutputTokens: 52},
		{At: 12_500_000, InputTokens: 1, OutputTokens: 1},
		{At: 1_500_000_000, InputTokens: 10_000_000, OutputTokens: 10_000_000},
		{At: 1_500_000_000, InputTokens: 17, OutputTokens: 9},
		{At: 3_600_000_000_000, InputTokens: 300, OutputTokens: 2},
	}
	var sb strings.Builder
	sb.WriteString("\xef\xbb\xbf") // a byte order mark is tolerated
	base := 1000.0                 // ms; times are relative to the first arrival
	for i, r := range want {
		want[i].Class = "trace"
		fmt.Fprintf(&sb, `{"timestamp": %v, "input_length": %d, "output_length": %d}`, base+float64(r.At)/1e6, r.InputTokens, r.OutputTokens)
		sb.WriteString("\r\n \n")
	}
	path := writeFile(t, t.TempDir(), "trace.jsonl", sb.String())
	tr := mustOpen(t, path, "")
	got := mustReplay(t, tr, 1)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
	if tr.Name != "trace" || tr.Seed != 1 || tr.Spec != nil || tr.Fleet != "" || tr.SLO != (SLO{}) {
		t.Errorf("trace fields: %+v", tr)
	}
	if n := tr.Notes(); len(n) != 0 {
		t.Errorf("notes %q", n)
	}
}

func TestMooncakeFields(t *testing.T) {
	// Integral numbers in any JSON spelling are integers; fractional
	// timestamps are kept to the nanosecond; escaped keys are keys;
	// unknown fields are ignored and noted; rows out of time order are
	// sorted stably.
	src := `{"timestamp": 5.0000015, "input_length": 1e3, "output_length": 20.0, "session_id": "a", "extra": {"x": [1]}}
{"hash_ids": null, "output_length": 7, "input_length": 3, "timestamp": 2}
{"timestamp": 5, "input_length": 4, "output_length": 4, "session_id": "b"}
{"time\u0073tamp": 2, "input_length": 9, "output_length": 9, "delay": 0}
{"timestamp": 6, "input_length": 0, "output_length": 0}
{"timestamp": 7, "input_length": 5, "output_length": 0e0}
`
	path := writeFile(t, t.TempDir(), "x.jsonl", src)
	tr := mustOpen(t, path, "")
	got := mustReplay(t, tr, 1)
	want := []Request{
		{At: 0, Class: "x", InputTokens: 3, OutputTokens: 7},
		{At: 0, Class: "x", InputTokens: 9, OutputTokens: 9},
		{At: 3_000_000, Class: "x", InputTokens: 4, OutputTokens: 4},
		{At: 3_000_002, Class: "x", InputTokens: 1000, OutputTokens: 20},
		{At: 4_000_000, Class: "x", InputTokens: 1, OutputTokens: 1},
		{At: 5_000_000, Class: "x", InputTokens: 5, OutputTokens: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
	// Zero lengths are read as one token, in notes (as the Azure traces').
	wantNotes := []string{
		path + ": 1 rows with input_length 0: set to 1 token",
		path + ": 2 rows with output_length 0: set to 1 token",
		path + `: ignored fields "delay" (1 rows), "extra" (1 rows), "session_id" (2 rows)`,
		path + ": 2 rows earlier than the row before them: rows sorted by time (stable)",
	}
	if n := tr.Notes(); !reflect.DeepEqual(n, wantNotes) {
		t.Errorf("notes\n%q\nwant\n%q", n, wantNotes)
	}
}

func TestMooncakePrefix(t *testing.T) {
	// Rows out of file order on purpose: "earlier" means earlier in time.
	src := `{"timestamp": 20, "input_length": 2000, "output_length": 1, "hash_ids": [1, 2, 4]}
{"timestamp": 10, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}
{"timestamp": 30, "input_length": 1600, "output_length": 1, "hash_ids": [1, 2, 3, 5]}
{"timestamp": 40, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 50, "input_length": 512, "output_length": 1, "hash_ids": [9]}
{"timestamp": 60, "input_length": 1, "output_length": 1, "hash_ids": [1]}
{"timestamp": 70, "input_length": 5000, "output_length": 1, "hash_ids": [9, 1, 2]}
{"timestamp": 80, "input_length": 5000, "output_length": 1}
{"timestamp": 90, "input_length": 5000, "output_length": 1, "hash_ids": []}
{"timestamp": 95, "input_length": 700, "output_length": 1, "hash_ids": [1, 2, 3, 5, 6]}
`
	dir := t.TempDir()
	a := writeFile(t, dir, "a.jsonl", src)
	b := writeFile(t, dir, "b.jsonl", src)
	reqs := mustReplay(t, mustOpen(t, a, ""), 1)
	type pt struct {
		group  string // symbolic group: the shared block sequence
		tokens int
	}
	want := []pt{
		{"", 0},          // [1 2 3]: nothing earlier
		{"1.2", 1024},    // [1 2 4] shares [1 2]
		{"1.2.3", 1536},  // [1 2 3 5] shares [1 2 3]
		{"1.2", 1023},    // [1 2] shares [1 2], clipped to input-1
		{"", 0},          // [9]: new
		{"", 0},          // [1] shares [1] but input 1 leaves no prefix
		{"9", 512},       // [9 1 2] shares [9]
		{"", 0},          // no hash_ids
		{"", 0},          // empty hash_ids
		{"1.2.3.5", 699}, // shares [1 2 3 5] (2048 tokens), clipped to 699
	}
	if len(reqs) != len(want) {
		t.Fatalf("%d requests", len(reqs))
	}
	ids := map[string]int64{}
	for i, w := range want {
		r := reqs[i]
		if r.PrefixTokens != w.tokens || (r.PrefixGroup == 0) != (w.group == "") {
			t.Fatalf("request %d: group %d tokens %d, want %q %d", i, r.PrefixGroup, r.PrefixTokens, w.group, w.tokens)
		}
		if w.group == "" {
			continue
		}
		if g, ok := ids[w.group]; ok && g != r.PrefixGroup {
			t.Errorf("request %d: group %d, earlier %q had %d", i, r.PrefixGroup, w.group, g)
		}
		ids[w.group] = r.PrefixGroup
	}
	seen := map[int64]string{}
	for name, g := range ids {
		if other, ok := seen[g]; ok {
			t.Errorf("sequences %q and %q share group %d", name, other, g)
		}
		seen[g] = name
	}

	// The same file as the second of a concatenation gets the same
	// structure under different group IDs.
	both := mustReplay(t, mustOpen(t, a+"+"+b, ""), 1)
	for i := range reqs {
		r1, r2 := both[i], both[len(reqs)+i]
		if r1.PrefixGroup != reqs[i].PrefixGroup || r2.PrefixTokens != reqs[i].PrefixTokens {
			t.Fatalf("request %d: %+v / %+v, alone %+v", i, r1, r2, reqs[i])
		}
		if r2.PrefixGroup != 0 && seen[r2.PrefixGroup] != "" {
			t.Errorf("segment 2 reuses group %d of segment 1", r2.PrefixGroup)
		}
	}
}

// A Mooncake prompt leaves its path of full blocks cached (CacheGroup,
// CacheTokens): the next turn of its conversation, which shares exactly
// those blocks (the last, partial block differs, as in Mooncake's
// conversation trace), finds them as its prefix group. A first turn,
// sharing nothing, leaves its own blocks too.
func TestMooncakeCacheGroup(t *testing.T) {
	src := `{"timestamp": 0, "input_length": 1300, "output_length": 9, "hash_ids": [0, 1, 2]}
{"timestamp": 10, "input_length": 2100, "output_length": 9, "hash_ids": [0, 1, 3, 4, 5]}
{"timestamp": 20, "input_length": 2600, "output_length": 9, "hash_ids": [0, 1, 3, 4, 6, 7]}
{"timestamp": 30, "input_length": 1024, "output_length": 9, "hash_ids": [0, 8]}
{"timestamp": 40, "input_length": 300, "output_length": 9, "hash_ids": [9]}
`
	reqs := mustReplay(t, mustOpen(t, writeFile(t, t.TempDir(), "c.jsonl", src), ""), 1)
	if len(reqs) != 5 {
		t.Fatalf("%d requests", len(reqs))
	}
	r0, r1, r2, r3, r4 := reqs[0], reqs[1], reqs[2], reqs[3], reqs[4]
	switch {
	case r0.PrefixGroup != 0 || r0.CacheGroup == 0 || r0.CacheTokens != 1024: // 2 full blocks of 1300
		t.Errorf("first turn: prefix %d/%d, leaves %d/%d: want none, and its 2 full blocks (1024 tokens)", r0.PrefixGroup, r0.PrefixTokens, r0.CacheGroup, r0.CacheTokens)
	case r1.PrefixGroup != r0.CacheGroup || r1.PrefixTokens != 1024:
		t.Errorf("second turn: prefix %d/%d, want the first turn's blocks %d/1024", r1.PrefixGroup, r1.PrefixTokens, r0.CacheGroup)
	case r1.CacheTokens != 2048 || r2.PrefixGroup != r1.CacheGroup || r2.PrefixTokens != 2048:
		t.Errorf("third turn: prefix %d/%d, want the second turn's %d/%d", r2.PrefixGroup, r2.PrefixTokens, r1.CacheGroup, r1.CacheTokens)
	case r3.CacheGroup == 0 || r3.CacheTokens != 1023 || r3.PrefixTokens != 512: // 2 full blocks, clipped to input-1
		t.Errorf("[0 8] of 1024 tokens: prefix %d/%d, leaves %d/%d", r3.PrefixGroup, r3.PrefixTokens, r3.CacheGroup, r3.CacheTokens)
	case r4.CacheGroup != 0 || r4.CacheTokens != 0: // no full block
		t.Errorf("300 tokens: leaves %d/%d, want nothing (no full block)", r4.CacheGroup, r4.CacheTokens)
	}
	if r2.CacheGroup == r1.CacheGroup || r1.CacheGroup == r0.CacheGroup {
		t.Error("turns leave the same group")
	}
}

// A gzip-compressed trace (by its magic bytes, or its .gz name) is refused
// with advice to decompress it, not with a parse error over binary bytes.
func TestGzipTraceRefused(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"))
	z.Close()
	for _, name := range []string{"code.csv", "conv.jsonl"} {
		path := writeFile(t, dir, name, b.String())
		if _, err := Open(path, ""); err == nil || !strings.Contains(err.Error(), "gzip-compressed") || !strings.Contains(err.Error(), "gunzip") {
			t.Errorf("%s: %v, want a gzip-compressed refusal", name, err)
		}
	}
	path := writeFile(t, dir, "code.csv.gz", b.String())
	if _, err := Open(path, ""); err == nil || !strings.Contains(err.Error(), "gzip-compressed") {
		t.Errorf("code.csv.gz: %v, want a gzip-compressed refusal", err)
	}
}

func TestAzureRoundTrip(t *testing.T) {
	// Any column order, CRLF line ends, blank lines, a byte order mark, no
	// final newline; the fraction keeps every digit.
	src := "\xef\xbb\xbfGeneratedTokens,TIMESTAMP,ContextTokens\r\n" +
		"44,2023-11-16 18:15:46.6805900,374\r\n" +
		"\r\n" +
		"1,2023-11-16 18:15:46.6805901,2\r\n" +
		"0,2023-11-16 18:15:47,10000000\r\n" +
		"7,2023-11-16 18:15:47.000000001,0\r\n" +
		"5,2023-11-17 00:00:00.5,9"
	path := writeFile(t, t.TempDir(), "az.csv", src)
	tr := mustOpen(t, path, "")
	got := mustReplay(t, tr, 1)
	want := []Request{
		{At: 0, Class: "az", InputTokens: 374, OutputTokens: 44},
		{At: 100, Class: "az", InputTokens: 2, OutputTokens: 1},
		{At: 319_410_000, Class: "az", InputTokens: 10_000_000, OutputTokens: 1},
		{At: 319_410_001, Class: "az", InputTokens: 1, OutputTokens: 7},
		{At: (5*3600+44*60+13)*event.Second + 819_410_000, Class: "az", InputTokens: 9, OutputTokens: 5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
	wantNotes := []string{
		path + ": 1 rows with ContextTokens 0: input set to 1 token",
		path + ": 1 rows with GeneratedTokens 0: output set to 1 token",
	}
	if n := tr.Notes(); !reflect.DeepEqual(n, wantNotes) {
		t.Errorf("notes %q, want %q", n, wantNotes)
	}
}

func TestAzureTime(t *testing.T) {
	base, ok := parseAzureTime([]byte("2023-11-16 18:15:46"))
	if !ok {
		t.Fatal("base")
	}
	for _, c := range []struct {
		in   string
		diff int64 // ns after base; -1 = rejected
	}{
		{"2023-11-16 18:15:46.6805900", 680_590_000},
		{"2023-11-16 18:15:46.1", 100_000_000},
		{"2023-11-16 18:15:46.000000001", 1},
		{"2023-11-16 18:15:46.999999999", 999_999_999},
		{"2023-11-17 00:00:00", (5*3600 + 44*60 + 14) * 1e9},
		{"2024-02-29 00:00:00", -2},
		{"2023-02-29 00:00:00", -1},
		{"2023-04-31 00:00:00", -1},
		{"2023-13-01 00:00:00", -1},
		{"2023-00-01 00:00:00", -1},
		{"2023-11-00 00:00:00", -1},
		{"2023-11-16 24:00:00", -1},
		{"2023-11-16 18:60:00", -1},
		{"2023-11-16 18:15:60", -1},
		{"2023-11-16 18:15:46.", -1},
		{"2023-11-16 18:15:46.1234567890", -1},
		{"2023-11-16 18:15:46.12a", -1},
		{"2023-11-16 18:15:46,5", -1},
		{"2023-11-16T18:15:46", -1},
		// Offsets (the 2024 traces end in +00:00), applied.
		{"2023-11-16 18:15:46Z", 0},
		{"2023-11-16 18:15:46.5+00:00", 500_000_000},
		{"2023-11-16 18:15:46+00:00", 0},
		{"2023-11-16 19:15:46+01:00", 0},
		{"2023-11-16 17:45:46.25-00:30", 250_000_000},
		{"2023-11-16 20:15:46+0200", 0},
		{"2023-11-16 18:15:46+24:00", -1},
		{"2023-11-16 18:15:46+00:60", -1},
		{"2023-11-16 18:15:46+00", -1},
		{"2023-11-16 18:15:46Z+00:00", -1},
		{"2023-11-16 18:15:46 +00:00", -1},
		{"2023-11-16 18:15:46.+00:00", -1},
		{"2023-11-16 18:15:46+00:00Z", -1},
		{"2023-11-16 18:15", -1},
		{"23-11-16 18:15:46.5", -1},
		{"+023-11-16 18:15:46", -1},
		{"1899-12-31 23:59:59", -1},
		{"2201-01-01 00:00:00", -1},
		{"", -1},
	} {
		got, ok := parseAzureTime([]byte(c.in))
		switch {
		case c.diff == -1 && ok:
			t.Errorf("%q accepted", c.in)
		case c.diff == -2 && !ok:
			t.Errorf("%q rejected", c.in)
		case c.diff >= 0 && (!ok || got-base != c.diff):
			t.Errorf("%q: %d, %v; want base+%d", c.in, got-base, ok, c.diff)
		}
	}
}

// importError imports src as a file named name (format by extension) and
// returns the error text with the temporary directory removed.
func importError(t *testing.T, name, src string) string {
	t.Helper()
	dir := t.TempDir()
	path := writeFile(t, dir, name, src)
	_, err := Open(path, "")
	if err == nil {
		t.Fatalf("%s accepted:\n%s", name, src)
	}
	return strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
}

const okRow = `{"timestamp": 0, "input_length": 10, "output_length": 5}`

func TestMooncakeErrors(t *testing.T) {
	for _, c := range []struct {
		name, line, want string
	}{
		{"bad JSON", `{"timestamp": 1, "input_length": 5,`,
			"t.jsonl:2:36: invalid JSON: unexpected end of JSON input: expected one JSON object per line"},
		{"bad JSON inside", `{"timestamp": 1,, "input_length": 5}`,
			"t.jsonl:2:17: invalid JSON: invalid character ',' looking for beginning of object key string: expected one JSON object per line"},
		{"two objects", okRow + " " + okRow,
			"t.jsonl:2:58: invalid JSON: invalid character '{' after top-level value: expected one JSON object per line"},
		{"not an object", `[1, 2]`, "t.jsonl:2: [1, 2]: expected a JSON object"},
		{"string line", `"x"`, `t.jsonl:2: "x": expected a JSON object`},
		{"missing timestamp", `{"input_length": 10, "output_length": 5}`,
			"t.jsonl:2: timestamp: missing: expected a number of milliseconds in [0, 3600000000]"},
		{"missing input", `{"timestamp": 0, "output_length": 5}`,
			"t.jsonl:2: input_length: missing: expected an integer in [0, 10000000]"},
		{"missing output", `{"timestamp": 0, "input_length": 5}`,
			"t.jsonl:2: output_length: missing: expected an integer in [0, 10000000]"},
		{"empty object", `{}`,
			"t.jsonl:2: timestamp: missing: expected a number of milliseconds in [0, 3600000000]\n" +
				"t.jsonl:2: input_length: missing: expected an integer in [0, 10000000]\n" +
				"t.jsonl:2: output_length: missing: expected an integer in [0, 10000000]"},
		{"wrong case is unknown", `{"Timestamp": 0, "timestamp": 0, "input_length": 10, "Output_Length": 5}`,
			"t.jsonl:2: output_length: missing: expected an integer in [0, 10000000]"},
		{"string length", `{"timestamp": 0, "input_length": "10", "output_length": 5}`,
			`t.jsonl:2: input_length: "10": expected an integer in [0, 10000000]`},
		{"fractional length", `{"timestamp": 0, "input_length": 10, "output_length": 2.5}`,
			"t.jsonl:2: output_length: 2.5: expected an integer in [0, 10000000]"},
		{"negative length", `{"timestamp": 0, "input_length": 10, "output_length": -3}`,
			"t.jsonl:2: output_length: -3: expected an integer in [0, 10000000]"},
		{"huge length", `{"timestamp": 0, "input_length": 10000001, "output_length": 1e30}`,
			"t.jsonl:2: input_length: 10000001: expected an integer in [0, 10000000]\n" +
				"t.jsonl:2: output_length: 1e30: expected an integer in [0, 10000000]"},
		{"null length", `{"timestamp": 0, "input_length": null, "output_length": 5}`,
			"t.jsonl:2: input_length: null: expected an integer in [0, 10000000]"},
		{"bool length", `{"timestamp": 0, "input_length": true, "output_length": 5}`,
			"t.jsonl:2: input_length: true: expected an integer in [0, 10000000]"},
		{"string timestamp", `{"timestamp": "0", "input_length": 10, "output_length": 5}`,
			`t.jsonl:2: timestamp: "0": expected a number of milliseconds in [0, 3600000000]`},
		{"negative timestamp", `{"timestamp": -1, "input_length": 10, "output_length": 5}`,
			"t.jsonl:2: timestamp: -1: expected a number of milliseconds in [0, 3600000000]"},
		{"late timestamp", `{"timestamp": 3600000000.5, "input_length": 10, "output_length": 5}`,
			"t.jsonl:2: timestamp: 3600000000.5: expected a number of milliseconds in [0, 3600000000]"},
		{"overflowing timestamp", `{"timestamp": 1e400, "input_length": 10, "output_length": 5}`,
			"t.jsonl:2: timestamp: 1e400: expected a number of milliseconds in [0, 3600000000]"},
		{"hash_ids not a list", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": {"a": 1}}`,
			`t.jsonl:2: hash_ids: {"a": 1}: expected an array of integers`},
		{"hash_ids element", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1, 2.5]}`,
			"t.jsonl:2: hash_ids[1]: 2.5: expected an integer"},
		{"hash_ids string", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": ["1"]}`,
			`t.jsonl:2: hash_ids[0]: "1": expected an integer`},
		{"duplicate field", `{"timestamp": 0, "input_length": 10, "output_length": 5, "input_length": 11}`,
			"t.jsonl:2: input_length: given twice: expected each field once"},
		{"long value cut", `{"timestamp": 0, "input_length": "` + strings.Repeat("x", 50) + `", "output_length": 5}`,
			`t.jsonl:2: input_length: "` + strings.Repeat("x", 39) + `…: expected an integer in [0, 10000000]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := importError(t, "t.jsonl", okRow+"\n"+c.line+"\n"+okRow+"\n")
			if got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestMooncakeFileErrors(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"empty", "", "t.jsonl: no requests: expected at least one row"},
		{"blank lines only", "\n  \r\n\t\n", "t.jsonl: no requests: expected at least one row"},
		{"problems on several lines", okRow + "\n{\n" + okRow + "\n\n[]\n",
			"t.jsonl:2:2: invalid JSON: unexpected end of JSON input: expected one JSON object per line\n" +
				"t.jsonl:5: []: expected a JSON object"},
		{"too many problems", strings.Repeat("x\n", 13),
			func() string {
				var lines []string
				for i := 1; i <= 10; i++ {
					lines = append(lines, fmt.Sprintf("t.jsonl:%d:1: invalid JSON: invalid character 'x' looking for beginning of value: expected one JSON object per line", i))
				}
				return strings.Join(append(lines, "t.jsonl: 3 more problems not shown"), "\n")
			}()},
		{"line too long", okRow + "\n" + strings.Repeat(" ", MaxLineBytes+1) + "\n",
			"t.jsonl:2: line longer than 1048576 bytes: expected at most 1048576"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := importError(t, "t.jsonl", c.src); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

const azureHeaderLine = "TIMESTAMP,ContextTokens,GeneratedTokens"
const azureOKRow = "2023-11-16 18:15:46.6805900,374,44"

func TestAzureErrors(t *testing.T) {
	const timeWant = azureTimeWant
	const headerWant = "expected the columns TIMESTAMP, ContextTokens, GeneratedTokens (in any order, each once)"
	for _, c := range []struct {
		name, src, want string
	}{
		{"empty file", "", "a.csv: no header: expected a first line TIMESTAMP,ContextTokens,GeneratedTokens"},
		{"header only", azureHeaderLine + "\r\n", "a.csv: no requests: expected at least one row"},
		{"wrong header name", "TIMESTAMP,ContextTokens,Generated\n" + azureOKRow,
			`a.csv:1: header "TIMESTAMP,ContextTokens,Generated": ` + headerWant},
		{"header case", "timestamp,ContextTokens,GeneratedTokens\n" + azureOKRow,
			`a.csv:1: header "timestamp,ContextTokens,GeneratedTokens": ` + headerWant},
		{"header repeated column", "TIMESTAMP,ContextTokens,ContextTokens\n" + azureOKRow,
			`a.csv:1: header "TIMESTAMP,ContextTokens,ContextTokens": ` + headerWant},
		{"header extra column", azureHeaderLine + ",Other\n" + azureOKRow + ",1",
			`a.csv:1: header "TIMESTAMP,ContextTokens,GeneratedTokens,Other": ` + headerWant},
		{"header missing", azureOKRow + "\n" + azureOKRow,
			`a.csv:1: header "2023-11-16 18:15:46.6805900,374,44": ` + headerWant},
		{"too many fields", azureHeaderLine + "\n" + azureOKRow + "\n" + azureOKRow + ",1\n",
			"a.csv:3: 4 fields: expected 3 (TIMESTAMP,ContextTokens,GeneratedTokens)"},
		{"too few fields", "ContextTokens,GeneratedTokens,TIMESTAMP\n374,2023-11-16 18:15:46\n",
			"a.csv:2: 2 fields: expected 3 (ContextTokens,GeneratedTokens,TIMESTAMP)"},
		{"non-numeric", azureHeaderLine + "\n2023-11-16 18:15:46.6805900,37a,44\n",
			`a.csv:2:29: ContextTokens: "37a": expected an integer in [0, 10000000]`},
		{"negative", azureHeaderLine + "\n2023-11-16 18:15:46.6805900,374,-4\n",
			`a.csv:2:33: GeneratedTokens: "-4": expected an integer in [0, 10000000]`},
		{"empty field", azureHeaderLine + "\n2023-11-16 18:15:46.6805900,,4\n",
			`a.csv:2:29: ContextTokens: "": expected an integer in [0, 10000000]`},
		{"padded", azureHeaderLine + "\n2023-11-16 18:15:46.6805900, 374,4\n",
			`a.csv:2:29: ContextTokens: " 374": expected an integer in [0, 10000000]`},
		{"decimal", azureHeaderLine + "\n2023-11-16 18:15:46.6805900,374.0,4\n",
			`a.csv:2:29: ContextTokens: "374.0": expected an integer in [0, 10000000]`},
		{"too large", azureHeaderLine + "\n2023-11-16 18:15:46.6805900,10000001,99999999999999999999999\n",
			`a.csv:2:29: ContextTokens: "10000001": expected an integer in [0, 10000000]` + "\n" +
				`a.csv:2:38: GeneratedTokens: "99999999999999999999999": expected an integer in [0, 10000000]`},
		{"bad timestamp", azureHeaderLine + "\n" + azureOKRow + "\n2023-11-31 18:15:46.6805900,374,44\n",
			`a.csv:3:1: TIMESTAMP: "2023-11-31 18:15:46.6805900": ` + timeWant},
		{"timestamp in another column", "ContextTokens,TIMESTAMP,GeneratedTokens\n374,2023-11-16 18:15:46.68059001234,44\n",
			`a.csv:2:5: TIMESTAMP: "2023-11-16 18:15:46.68059001234": ` + timeWant},
		{"quoted", azureHeaderLine + "\n\"2023-11-16 18:15:46.6805900\",374,44\n",
			`a.csv:2:1: TIMESTAMP: "\"2023-11-16 18:15:46.6805900\"": ` + timeWant},
		{"span too long", azureHeaderLine + "\n2023-01-01 00:00:00,1,1\n2023-03-01 00:00:00,1,1\n",
			"a.csv: arrivals span 1416h0m0s: expected at most 1000h0m0s"},
		{"span plus gap too long", azureHeaderLine + "\n2023-01-01 00:00:00,1,1\n2023-01-22 16:00:00,1,1\n",
			"a.csv: lasts 1040h0m0s (arrivals over 520h0m0s, then one mean gap): expected at most 1000h0m0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := importError(t, "a.csv", c.src); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestImportReaderErrors(t *testing.T) {
	// parse functions see only a reader; a failing one is reported.
	_, err := parseAzure(failingReader{}, 0, "r.csv", "r", 0)
	if err == nil || err.Error() != "r.csv: disk on fire" {
		t.Errorf("azure: %v", err)
	}
	_, err = parseMooncake(failingReader{}, 0, "r.jsonl", "r", 0)
	if err == nil || err.Error() != "r.jsonl: disk on fire" {
		t.Errorf("mooncake: %v", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, fmt.Errorf("disk on fire") }

func TestMooncakeIgnoredNames(t *testing.T) {
	var sb strings.Builder
	for i := range maxIgnoredNames + 2 {
		fmt.Fprintf(&sb, `{"timestamp": %d, "input_length": 1, "output_length": 1, "f%02d": 0}`+"\n", i, i)
	}
	path := writeFile(t, t.TempDir(), "n.jsonl", sb.String())
	notes := mustOpen(t, path, "").Notes()
	if len(notes) != 1 || !strings.HasPrefix(notes[0], path+`: ignored fields "f00" (1 rows), "f01" (1 rows),`) ||
		!strings.HasSuffix(notes[0], `"f19" (1 rows), 2 more of other names`) {
		t.Errorf("notes %q", notes)
	}
}
