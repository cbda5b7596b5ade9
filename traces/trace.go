package traces

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Trace formats accepted by Open.
const (
	FormatSpec     = "spec"     // YAML trace specification (.yaml, .yml)
	FormatMooncake = "mooncake" // Mooncake JSONL (.jsonl)
	FormatAzure    = "azure"    // Azure LLM inference CSV (.csv)
)

// Limits of imported traces.
const (
	// MaxImportBytes bounds the size of one imported file.
	MaxImportBytes = 1 << 30
	// MaxLineBytes bounds one line of an imported file.
	MaxLineBytes = 1 << 20
	// MooncakeBlockTokens is the number of prompt tokens one Mooncake
	// hash_ids entry stands for.
	MooncakeBlockTokens = 512
	// SingleSegmentGap is the mean gap used for a segment whose arrivals
	// all fall at one instant (a single request, or equal timestamps).
	SingleSegmentGap = event.Second
	// WindowLength, MinWindows and MaxWindows set how the Bounds of a
	// single imported file are split: ceil(span/WindowLength) equal
	// windows, at least MinWindows and at most MaxWindows.
	WindowLength = 5 * 60 * event.Second
	MinWindows   = 10
	MaxWindows   = 20
	// maxScaledTime bounds the end of a trace after time scaling (1000 times
	// MaxDuration, about 114 years), far below event.Never.
	maxScaledTime = 1000 * event.Time(MaxDuration)
)

// Trace is a workload the simulator can replay: a synthetic Spec, or
// requests imported from a file (or several, concatenated).
type Trace struct {
	Name  string // for reports: the spec name, or the segment classes joined by "+"
	Fleet string // suggested fleet ("" = none); from the Spec
	SLO   SLO    // from the Spec; zero for imported traces
	Seed  uint64 // default seed (Spec.Seed; 1 for imported)
	Spec  *Spec  // non-nil for synthetic traces

	segs   []*segment   // imported files, in order
	starts []event.Time // imported: when each segment's first arrival is sent, at scale 1
	n      int          // imported requests, all segments
	bounds []event.Time // imported phase bounds at scale 1: [0, ..., end]
	hash   string       // sha256 hex of the source bytes
	notes  []string     // what the importers changed or ignored
	batch  float64      // imported: mean batch size (WithBurst)
}

// WithBurst returns the trace with its arrivals made bursty (issue 10):
// cv > 0 redraws every phase of a synthetic trace from a gamma process with
// that coefficient of variation of the gaps (1 is as bursty as Poisson;
// an imported trace keeps its own times and refuses it); batchMean > 1
// groups consecutive arrivals into batches sent at one instant, batch
// sizes geometric with that mean, drawn from the seed (for an imported
// trace too). The name and hash say what changed.
func (t *Trace) WithBurst(cv, batchMean float64) (*Trace, error) {
	if cv == 0 && batchMean == 0 {
		return t, nil
	}
	c := *t
	var tags []string
	if cv != 0 {
		if t.Spec == nil {
			return nil, fmt.Errorf("trace %s: --arrival-cv: an imported trace keeps its recorded arrival times: expected a synthetic trace (--batch-mean works on both)", t.Name)
		}
		tags = append(tags, "cv "+formatFloat(cv))
	}
	if batchMean != 0 {
		tags = append(tags, "batch mean "+formatFloat(batchMean))
	}
	if t.Spec != nil {
		sp := *t.Spec
		sp.Phases = append([]Phase(nil), t.Spec.Phases...)
		if cv != 0 {
			sp.Arrival.Process, sp.Arrival.CV, sp.Arrival.Burstiness = ProcessGamma, cv, 0
			for i := range sp.Phases {
				sp.Phases[i].Arrival = nil
			}
		}
		if batchMean != 0 {
			sp.Arrival.BatchMean = batchMean
		}
		if err := sp.Validate(); err != nil {
			return nil, err
		}
		c.Spec = &sp
	} else {
		if !(batchMean >= 1 && batchMean <= 1000) {
			return nil, fmt.Errorf("trace %s: batch mean %s: expected between 1 and 1000", t.Name, formatFloat(batchMean))
		}
		c.batch = batchMean
	}
	c.Name = t.Name + " (" + strings.Join(tags, ", ") + ")"
	sum := sha256.Sum256([]byte(t.Hash() + "|" + strings.Join(tags, ",")))
	c.hash = hex.EncodeToString(sum[:])
	return &c, nil
}

// segment is one imported file: its requests in memory (reqs), or, when
// its rows were in time order in a regular file, what a Stream needs to
// read them again from the file (src).
type segment struct {
	class string
	n     int        // requests
	first int64      // the first arrival, ns on the file's own clock
	last  event.Time // the last arrival, relative to the first
	gap   event.Time // mean inter-arrival gap, >= 1 ns
	notes []string
	reqs  []Request   // in memory: sorted by At; At relative to the file's first arrival (so reqs[0].At == 0)
	src   *fileSource // streamed from the file (reqs is nil)
}

// Open returns the trace arg names. arg is a built-in trace name (see
// Builtin), a path, or several paths joined with "+", which are imported
// and concatenated in order ("+" always separates paths). format is "" to
// choose by extension (.yaml/.yml spec, .jsonl Mooncake, .csv Azure) or one
// of FormatSpec, FormatMooncake, FormatAzure to force one format on every
// path. A spec cannot be concatenated. See the package documentation for
// how imported files are placed in time.
//
// A built-in trace is named by its name (chatdoc) or by its file name
// (chatdoc.yaml, traces/chatdoc.yaml) when no such file exists where the
// command runs, so the same command line works from any directory.
func Open(arg, format string) (t *Trace, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("trace %q: cannot open: internal error: %v", arg, r)
		}
	}()
	switch format {
	case "", FormatSpec, FormatMooncake, FormatAzure:
	default:
		return nil, fmt.Errorf("trace %q: format %q: expected %s, %s, %s or empty (by extension)",
			arg, format, FormatSpec, FormatMooncake, FormatAzure)
	}
	if arg == "" {
		return nil, fmt.Errorf("trace \"\": expected a built-in trace name (%s) or a path", strings.Join(Builtin(), ", "))
	}
	parts := strings.Split(arg, "+")
	if len(parts) == 1 && (format == "" || format == FormatSpec) {
		if rest, ok := strings.CutPrefix(arg, FixedPrefix); ok {
			if _, err := os.Stat(arg); err != nil { // a file of that name wins
				return fixedTrace(arg, rest)
			}
		}
		if name, ok := BuiltinByFile(arg); ok {
			data, _ := builtinData(name)
			return specTrace(data, name+".yaml (built-in)")
		}
	}
	h := sha256.New()
	var segs []*segment
	for i, path := range parts {
		if path == "" {
			return nil, fmt.Errorf("trace %q: path %d of %d is empty: expected paths joined by \"+\"", arg, i+1, len(parts))
		}
		f := format
		if f == "" {
			if f = formatOf(path); f == "" {
				what := fmt.Sprintf("trace %q", arg)
				if len(parts) > 1 {
					what += fmt.Sprintf(": %q", path)
				}
				if strings.EqualFold(filepath.Ext(path), ".gz") {
					return nil, fmt.Errorf("%s: %s, expected uncompressed: decompress it first (gunzip -k %s)", what, gzipNote, path)
				}
				return nil, fmt.Errorf("%s: not a built-in trace, and extension %q is unknown: expected a built-in trace (%s), a .yaml/.yml spec, a .jsonl Mooncake trace, a .csv Azure trace, or a format given explicitly",
					what, filepath.Ext(path), strings.Join(Builtin(), ", "))
			}
		}
		if f == FormatSpec {
			if len(parts) > 1 {
				return nil, fmt.Errorf("trace %q: %q is a spec: expected only imported traces (.jsonl, .csv) when joining paths with \"+\"", arg, path)
			}
			data, err := readFile(path, MaxSpecBytes)
			if err != nil {
				return nil, err
			}
			return specTrace(data, path)
		}
		seg, err := importFile(path, f, i, h)
		if err != nil {
			return nil, err
		}
		segs = append(segs, seg)
	}
	return assemble(segs, hex.EncodeToString(h.Sum(nil)))
}

// gzipNote says a file is gzip-compressed.
const gzipNote = "gzip-compressed (it begins with gzip's magic bytes or ends in .gz)"

// formatOf is the format of path by extension, or "" when unknown.
func formatOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return FormatSpec
	case ".jsonl":
		return FormatMooncake
	case ".csv":
		return FormatAzure
	}
	return ""
}

// FixedPrefix names a synthetic trace of fixed lengths: "fixed:IN:OUT"
// is every prompt IN tokens and every answer OUT tokens, Poisson arrivals
// at 1 req/s (scaled by a run's rate) for an hour (cut by live's --limit
// or --duration): vllm bench serve's random dataset with a range ratio of
// 0 (--random-input-len IN --random-output-len OUT).
const FixedPrefix = "fixed:"

// fixedTrace is the trace "fixed:IN:OUT" names (rest is "IN:OUT").
func fixedTrace(arg, rest string) (*Trace, error) {
	in, out, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, fmt.Errorf("trace %q: expected fixed:IN:OUT, prompt and answer lengths in tokens (such as fixed:1024:128)", arg)
	}
	var n [2]int
	for i, f := range []struct{ name, v string }{{"IN", in}, {"OUT", out}} {
		v, err := strconv.Atoi(f.v)
		if err != nil || v < 1 || v > MaxTokens {
			return nil, fmt.Errorf("trace %q: %s %q: expected fixed:IN:OUT, prompt and answer lengths in tokens from 1 to %d (such as fixed:1024:128)", arg, f.name, f.v, MaxTokens)
		}
		n[i] = v
	}
	name := fmt.Sprintf("fixed-%d-%d", n[0], n[1])
	spec := fmt.Sprintf(`name: %s
description: Every prompt %d tokens and every answer %d, Poisson arrivals at 1 req/s for an hour (scaled by the rate).
seed: 1
arrival: {process: poisson}
classes:
  fixed:
    input:  {dist: fixed, value: %d}
    output: {dist: fixed, value: %d}
phases:
  - {name: fixed, duration: 1h, rate: 1, mix: {fixed: 1}}
`, name, n[0], n[1], n[0], n[1])
	return specTrace([]byte(spec), arg+" (synthetic)")
}

func specTrace(data []byte, source string) (*Trace, error) {
	s, err := Parse(data, source)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return &Trace{Name: s.Name, Fleet: s.Fleet, SLO: s.SLO, Seed: s.Seed, Spec: s, hash: hex.EncodeToString(sum[:])}, nil
}

func readFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", path, err)
	}
	defer f.Close()
	data, err := readLimited(f, limit)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", path, err)
	}
	return data, nil
}

// importFile parses the file at path in format f, the index-th of a
// concatenation, feeding its bytes to h.
//
// A regular file is read once, whole, keeping no row: every problem is
// reported as when importing it into memory, and the segment keeps the
// file's statistics and identity (size, modification time, SHA-256), so
// that a Stream reads the requests from the file again (fileSource). A
// file whose rows are not in time order must be sorted, so it is then read
// again into memory (checked against the first pass); so is, in one pass,
// input that cannot be read twice (a pipe, /dev/stdin).
func importFile(path, f string, index int, h hash.Hash) (*segment, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err == nil && st.Mode().IsRegular() {
		var magic [2]byte
		if n, _ := file.ReadAt(magic[:], 0); n == 2 && magic == [2]byte{0x1f, 0x8b} {
			return nil, fmt.Errorf("trace %q: %s, expected an uncompressed %s trace: decompress it first (gunzip -c %s > FILE)", path, gzipNote, f, path)
		}
	}
	if err != nil || !st.Mode().IsRegular() {
		r := io.TeeReader(file, h)
		if f == FormatMooncake {
			return parseMooncake(r, 0, path, classOf(path), index)
		}
		return parseAzure(r, 0, path, classOf(path), index)
	}
	return scanFile(file, st, path, f, index, h)
}

// classOf is the class of the requests of the file at path: its base name
// without extension ("traces/azure/code.csv" gives "code").
func classOf(path string) string {
	base := filepath.Base(path)
	if c := strings.TrimSuffix(base, filepath.Ext(base)); c != "" {
		return c
	}
	return base
}

// assemble concatenates segments into an imported trace. Segment 0 starts
// at 0; segment k > 0 starts one mean gap of segment k after the last
// arrival of segment k-1; the trace ends one mean gap of the last segment
// after its last arrival.
func assemble(segs []*segment, sum string) (*Trace, error) {
	t := &Trace{Seed: 1, hash: sum, segs: segs}
	var names []string
	for _, s := range segs {
		t.n += s.n
	}
	if t.n > MaxRequests {
		return nil, fmt.Errorf("trace: %d requests in all: expected at most %d", t.n, MaxRequests)
	}
	t.bounds = []event.Time{0}
	var start, last event.Time
	for k, s := range segs {
		if k > 0 {
			start = last + s.gap
			t.bounds = append(t.bounds, start)
		}
		t.starts = append(t.starts, start)
		last = start + s.last
		names = append(names, s.class)
		t.notes = append(t.notes, s.notes...)
	}
	end := last + segs[len(segs)-1].gap
	if end > event.Time(MaxDuration) {
		return nil, fmt.Errorf("trace %s: lasts %v: expected at most %v", strings.Join(names, "+"), time.Duration(end), MaxDuration)
	}
	if len(segs) == 1 {
		t.bounds = windows(end)
	} else {
		t.bounds = append(t.bounds, end)
	}
	t.Name = strings.Join(names, "+")
	return t, nil
}

// windows splits [0, end) into equal windows: ceil(end/WindowLength), at
// least MinWindows and at most MaxWindows, and never narrower than 1 ns.
func windows(end event.Time) []event.Time {
	w := int64((end + WindowLength - 1) / WindowLength)
	w = min(max(w, MinWindows), MaxWindows, int64(end))
	b := make([]event.Time, w+1)
	for i := range w + 1 {
		// i*end/w without overflow: end < 2^62 and i <= 20.
		b[i] = event.Time(int64(end)/w*i + int64(end)%w*i/w)
	}
	return b
}

// MeanRate is the mean arrival rate in requests per second at scale 1:
// Spec.MeanRate for a synthetic trace, and the number of requests over the
// trace's span (Bounds(1)'s last element) for an imported one.
func (t *Trace) MeanRate() float64 {
	if t.Spec != nil {
		return t.Spec.MeanRate()
	}
	if len(t.bounds) == 0 {
		return 0
	}
	return float64(t.n) / t.bounds[len(t.bounds)-1].Seconds()
}

// Generate returns the requests of the trace, sorted by At. For a
// synthetic trace it is Spec.Generate. An imported trace ignores seed (it
// is data) and scales time: a request imported at At is sent at
// round(At/scale), so the mean rate becomes scale×MeanRate. Each call
// returns a new slice, holding what Stream hands out.
func (t *Trace) Generate(seed uint64, scale float64) ([]Request, error) {
	if t.Spec != nil {
		return t.Spec.Generate(seed, scale)
	}
	st, err := t.Stream(seed, scale)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	out := make([]Request, 0, t.n)
	var r Request
	for st.Next(&r) {
		out = append(out, r)
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Stream returns the requests Generate would, one at a time and in the
// same order, without building the slice: a synthetic trace is generated
// as it is read (Spec.Stream); an imported trace is scaled (and batched)
// request by request, its files read again and parsed as the stream is
// read (see Open), or, for a file that had to be sorted or cannot be read
// twice, taken from memory. Stream checks that every file is still as it
// was when the trace was opened (size and modification time); the stream
// checks every row, and each file's SHA-256 at its end, and stops with an
// error (Err) when a file changed. Close the stream when done with it.
func (t *Trace) Stream(seed uint64, scale float64) (*Stream, error) {
	if t.Spec != nil {
		return t.Spec.Stream(seed, scale)
	}
	b, err := t.scaledBounds(scale)
	if err != nil {
		return nil, err
	}
	for _, s := range t.segs {
		if s.src != nil {
			if err := s.src.check(); err != nil {
				return nil, err
			}
		}
	}
	return &Stream{imp: &importStream{t: t, b: b, scale: scale, batch: newBatcher(seed, t.batch)}}, nil
}

// Stream hands out a trace's requests one at a time, sorted by At (see
// Trace.Stream and Spec.Stream). It is not safe for concurrent use. A
// stream of an imported trace holds one file open while it reads it; it
// closes it at the end of the trace, on an error, or on Close.
type Stream struct {
	gen *generator
	imp *importStream
}

// Next stores the next request in r and reports true, or reports false
// at the end of the trace or on an error (Err).
func (s *Stream) Next(r *Request) bool {
	if s.gen != nil {
		return s.gen.next(r)
	}
	return s.imp.next(r)
}

// Err is why Next stopped before the end of the trace, or nil.
func (s *Stream) Err() error {
	if s.gen != nil {
		return s.gen.err
	}
	return s.imp.err
}

// Close releases the file the stream is reading, if any; Next then
// reports false. It is safe to call more than once.
func (s *Stream) Close() error {
	if s.imp != nil {
		s.imp.close()
		s.imp.seg = len(s.imp.t.segs)
	}
	return nil
}

// importStream scales an imported trace's requests one at a time.
type importStream struct {
	t     *Trace
	b     []event.Time // bounds at the scale
	scale float64
	batch batcher
	seg   int         // segment of the next request
	i     int         // next request of an in-memory segment
	rd    *fileReader // the streamed segment being read
	p     int         // phase of the next request
	err   error
}

// close closes the file being read, if any.
func (s *importStream) close() {
	if s.rd != nil {
		s.rd.close()
		s.rd = nil
	}
}

// read stores the next request of the trace at scale 1 in r.
func (s *importStream) read(r *Request) bool {
	for s.err == nil && s.seg < len(s.t.segs) {
		seg := s.t.segs[s.seg]
		if seg.src == nil {
			if s.i < len(seg.reqs) {
				*r = seg.reqs[s.i]
				s.i++
				r.At += s.t.starts[s.seg]
				return true
			}
		} else {
			if s.rd == nil {
				if s.rd, s.err = seg.src.open(); s.err != nil {
					return false
				}
			}
			if s.rd.next(r) {
				r.At += s.t.starts[s.seg]
				return true
			}
			s.err = s.rd.err
			s.close()
		}
		s.seg++
		s.i = 0
	}
	return false
}

func (s *importStream) next(out *Request) bool {
	var r Request
	if !s.read(&r) {
		s.close()
		return false
	}
	for r.At >= s.t.bounds[s.p+1] {
		s.p++
	}
	at := event.Time(math.Round(float64(r.At) / s.scale))
	// Rounding cannot move a request out of its phase unless the phase
	// was widened to 1 ns by scaledBounds; keep it inside.
	r.At = min(max(at, s.b[s.p]), s.b[s.p+1]-1)
	s.batch.apply(&r)
	*out = r
	return true
}

// Bounds returns the phase boundaries at the given scale: 0, the end of
// each phase, and the end of the trace, so that phase p holds the requests
// with Bounds[p] <= At < Bounds[p+1]. A synthetic trace's bounds are its
// cumulative phase durations, the same at every scale. An imported trace
// has one phase per concatenated file, or, for a single file, equal
// windows (see WindowLength); its bounds are divided by scale like its
// arrival times. Bounds is nil when Generate would reject scale.
func (t *Trace) Bounds(scale float64) []event.Time {
	if t.Spec != nil {
		if !validScale(scale) {
			return nil
		}
		b := []event.Time{0}
		var at event.Time
		for _, p := range t.Spec.Phases {
			at += event.Time(p.Duration)
			b = append(b, at)
		}
		return b
	}
	b, err := t.scaledBounds(scale)
	if err != nil {
		return nil
	}
	return b
}

func validScale(scale float64) bool {
	return scale > 0 && !math.IsInf(scale, 0)
}

// scaledBounds divides the bounds by scale, rounding to the nanosecond and
// keeping every phase at least 1 ns wide.
func (t *Trace) scaledBounds(scale float64) ([]event.Time, error) {
	if !validScale(scale) {
		return nil, fmt.Errorf("trace %s: scale %s: expected a finite number > 0", t.Name, formatFloat(scale))
	}
	if len(t.bounds) < 2 {
		return nil, fmt.Errorf("trace %s: no requests", t.Name)
	}
	end := float64(t.bounds[len(t.bounds)-1]) / scale
	if !(end <= float64(maxScaledTime)) {
		return nil, fmt.Errorf("trace %s: scale %s stretches the trace to %.4g h: expected at most %d h",
			t.Name, formatFloat(scale), end/float64(time.Hour), int64(time.Duration(maxScaledTime)/time.Hour))
	}
	b := make([]event.Time, len(t.bounds))
	for i := 1; i < len(b); i++ {
		b[i] = max(event.Time(math.Round(float64(t.bounds[i])/scale)), b[i-1]+1)
	}
	return b, nil
}

// Imported is how many requests an imported trace holds (0 for a spec).
func (t *Trace) Imported() int { return t.n }

// SeedMatters reports whether the seed changes the trace's requests: a
// synthetic trace draws them from it; an imported one is data, whose
// seed draws only the batches laid over it (WithBurst).
func (t *Trace) SeedMatters() bool { return t.Spec != nil || t.batch > 1 }

// Hash is the hex SHA-256 of the trace's source bytes: the spec file (or
// the embedded built-in), or every imported file, in order, as one stream.
func (t *Trace) Hash() string { return t.hash }

// Notes lists what the importers changed or ignored (clamped lengths,
// re-sorted rows, ignored fields), one line each, for the CLI to print.
// It is empty for synthetic traces.
func (t *Trace) Notes() []string { return append([]string(nil), t.notes...) }

// BuiltinByFile returns the built-in trace arg names: its name, or, when no
// file arg exists, a path whose base is NAME.yaml or NAME.yml.
func BuiltinByFile(arg string) (string, bool) {
	if _, ok := builtinData(arg); ok && !strings.ContainsAny(arg, "/\\") {
		return arg, true
	}
	if _, err := os.Stat(arg); err == nil {
		return "", false
	}
	base := filepath.Base(arg)
	for _, ext := range []string{".yaml", ".yml"} {
		if name, ok := strings.CutSuffix(base, ext); ok {
			if _, ok := builtinData(name); ok {
				return name, true
			}
		}
	}
	return "", false
}
