package traces

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Mooncake JSONL: one JSON object per line, as replayed by NVIDIA AIPerf
// (--custom-dataset-type mooncake_trace):
//
//	{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}
//
// Known fields are checked strictly; other fields are counted and ignored.

const (
	// maxHashIDsPerRow bounds one row's hash_ids: enough blocks for a
	// MaxTokens prompt.
	maxHashIDsPerRow = (MaxTokens + MooncakeBlockTokens - 1) / MooncakeBlockTokens
	// maxHashIDs bounds the hash_ids of one file, which bounds the memory
	// of the prefix trie.
	maxHashIDs = 20_000_000
	// maxTimestampMs is the largest timestamp accepted, in milliseconds
	// (MaxDuration).
	maxTimestampMs = float64(MaxDuration / time.Millisecond)
	// maxIgnoredNames bounds the distinct unknown field names listed in
	// the notes.
	maxIgnoredNames = 20
)

// parseMooncake reads a Mooncake JSONL file of size bytes (0 if unknown;
// it only sizes buffers) into memory. source names the file in errors,
// class is the class of its requests and index its position in a
// concatenation (it seeds the prefix group IDs).
func parseMooncake(r io.Reader, size int64, source, class string, index int) (*segment, error) {
	errs := &importErrors{source: source}
	return readSegment(newRowReader(FormatMooncake, r, errs, false), errs, size, 80, class, index)
}

// mooncakeReader reads the rows of a Mooncake JSONL file (see rowReader).
type mooncakeReader struct {
	rowScan
	scratch      []int64 // one row's hash_ids, reused
	rowIDs       []int64 // the hash_ids of the row last returned
	total        int     // hash_ids of the rows so far
	ignored      map[string]int
	ignoredOther int
	ignore       func(string)
	zeros        [2]int // rows with input_length, output_length 0 (set to 1)
}

func newMooncakeReader(sc rowScan) *mooncakeReader {
	m := &mooncakeReader{rowScan: sc, ignored: map[string]int{}}
	m.ignore = func(name string) {
		if _, ok := m.ignored[name]; ok || len(m.ignored) < maxIgnoredNames {
			m.ignored[name]++
		} else {
			m.ignoredOther++
		}
	}
	return m
}

func (m *mooncakeReader) ids() []int64 { return m.rowIDs }

func (m *mooncakeReader) next(out *row) bool {
	m.rowIDs = nil
	for !m.stop() {
		line, ok := m.lr.next()
		if !ok {
			m.done = true
			break
		}
		if blank(line) {
			continue
		}
		rw, ids, good := parseMooncakeLine(line, m.lr.line, m.errs, &m.scratch, m.ignore, &m.zeros)
		if !good {
			continue
		}
		if m.total+len(ids) > maxHashIDs {
			m.errs.at(m.lr.line, 0, "hash_ids: more than %d in the file: expected at most %d", maxHashIDs, maxHashIDs)
			m.done = true
			break
		}
		m.total += len(ids)
		if !m.counted() {
			break
		}
		*out, m.rowIDs = rw, ids
		return true
	}
	return false
}

func (m *mooncakeReader) finish() []string {
	m.lr.check(m.errs)
	var notes []string
	for i, name := range [...]string{"input_length", "output_length"} {
		if m.zeros[i] > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d rows with %s 0: set to 1 token", m.errs.source, m.zeros[i], name))
		}
	}
	if len(m.ignored) == 0 {
		return notes
	}
	names := make([]string, 0, len(m.ignored))
	for name := range m.ignored {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s (%d rows)", strconv.Quote(name), m.ignored[name])
	}
	if m.ignoredOther > 0 {
		parts = append(parts, fmt.Sprintf("%d more of other names", m.ignoredOther))
	}
	return append(notes, fmt.Sprintf("%s: ignored fields %s", m.errs.source, strings.Join(parts, ", ")))
}

// parseMooncakeLine parses one non-blank line into a row and its hash_ids
// (nil when absent), which live in *scratch until the next call. It records
// every problem of the line in errs and reports whether there were none.
// ignore is called with the name of each unknown field.
//
// encoding/json first checks that the line is valid JSON (and, when it is
// not, says where); a small walker over the valid text then visits the
// fields in order, which keeps key matching exact (encoding/json's struct
// decoding folds case and lets a repeated key win silently) and avoids an
// allocation per token.
func parseMooncakeLine(line []byte, lineNo int, errs *importErrors, scratch *[]int64, ignore func(string), zeros *[2]int) (row, []int64, bool) {
	if !json.Valid(line) {
		var v json.RawMessage
		err := json.Unmarshal(line, &v)
		col := 0
		var se *json.SyntaxError
		if errors.As(err, &se) {
			col = int(se.Offset) // the 1-based column of the offending byte
			if strings.HasPrefix(se.Error(), "unexpected end") {
				col = len(line) + 1
			}
		}
		msg := "invalid"
		if err != nil {
			msg = strings.TrimPrefix(err.Error(), "json: ")
		}
		errs.at(lineNo, col, "invalid JSON: %s: expected one JSON object per line", msg)
		return row{}, nil, false
	}
	w := jsonWalker{b: line}
	w.space()
	if w.b[w.i] != '{' {
		errs.at(lineNo, 0, "%s: expected a JSON object", show(bytes.TrimSpace(line)))
		return row{}, nil, false
	}
	rw := row{ids: -1}
	var ids []int64
	ok := true
	bad := func(format string, args ...any) {
		errs.at(lineNo, 0, format, args...)
		ok = false
	}
	var seenTS, seenIn, seenOut, seenIDs bool
	for w.member() {
		key, v := w.key(), w.value()
		var seen *bool
		switch string(key) {
		case "timestamp":
			seen = &seenTS
			ms, good := jsonFloat(v)
			if !good || !(ms >= 0 && ms <= maxTimestampMs) {
				bad("timestamp: %s: expected a number of milliseconds in [0, %.0f]", show(v), maxTimestampMs)
				break
			}
			rw.at = int64(math.Round(ms * 1e6))
		case "input_length":
			seen = &seenIn
			if n, good := jsonLength(v); good {
				rw.in = int32(n)
			} else if n, good := jsonInt(v); good && n == 0 { // as the Azure traces' 0: one token, said in a note
				rw.in = 1
				zeros[0]++
			} else {
				bad("input_length: %s: expected an integer in [0, %d]", show(v), MaxTokens)
			}
		case "output_length":
			seen = &seenOut
			if n, good := jsonLength(v); good {
				rw.out = int32(n)
			} else if n, good := jsonInt(v); good && n == 0 {
				rw.out = 1
				zeros[1]++
			} else {
				bad("output_length: %s: expected an integer in [0, %d]", show(v), MaxTokens)
			}
		case "hash_ids":
			seen = &seenIDs
			var msg string
			if ids, msg = jsonIDs(v, (*scratch)[:0]); msg != "" {
				bad("%s", msg)
			} else if ids != nil {
				*scratch = ids
			}
		default:
			ignore(string(key))
			continue
		}
		if *seen {
			bad("%s: given twice: expected each field once", key)
		}
		*seen = true
	}
	if !seenTS {
		bad("timestamp: missing: expected a number of milliseconds in [0, %.0f]", maxTimestampMs)
	}
	if !seenIn {
		bad("input_length: missing: expected an integer in [0, %d]", MaxTokens)
	}
	if !seenOut {
		bad("output_length: missing: expected an integer in [0, %d]", MaxTokens)
	}
	return rw, ids, ok
}

// jsonNumber reports whether v is a JSON number literal.
func jsonNumber(v []byte) bool {
	return len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9')
}

func jsonFloat(v []byte) (float64, bool) {
	if !jsonNumber(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// jsonInt parses an integral JSON number: 12, 1e3 and 12.0 are integers,
// 1.5 and "12" are not.
func jsonInt(v []byte) (int64, bool) {
	if !jsonNumber(v) {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || !(math.Abs(f) < 1<<63) {
		return 0, false
	}
	return int64(f), true
}

// jsonLength parses a token length in [1, MaxTokens].
func jsonLength(v []byte) (int, bool) {
	n, ok := jsonInt(v)
	if !ok || n < 1 || n > MaxTokens {
		return 0, false
	}
	return int(n), true
}

// jsonIDs parses hash_ids, null (absent) or an array of integers,
// appending them to buf. It returns a problem message, or "".
func jsonIDs(v []byte, buf []int64) ([]int64, string) {
	if string(v) == "null" {
		return nil, ""
	}
	if v[0] != '[' {
		return nil, fmt.Sprintf("hash_ids: %s: expected an array of integers", show(v))
	}
	w := jsonWalker{b: v}
	ids := buf[:0:cap(buf)]
	if ids == nil {
		ids = []int64{}
	}
	for w.element() {
		e := w.value()
		if len(ids) == maxHashIDsPerRow {
			return nil, fmt.Sprintf("hash_ids: more than %d entries: expected at most %d (a %d-token prompt)", maxHashIDsPerRow, maxHashIDsPerRow, MaxTokens)
		}
		n, ok := jsonInt(e)
		if !ok {
			return nil, fmt.Sprintf("hash_ids[%d]: %s: expected an integer", len(ids), show(e))
		}
		ids = append(ids, n)
	}
	return ids, ""
}

// jsonWalker walks JSON text that encoding/json has found valid.
type jsonWalker struct {
	b []byte
	i int
}

func (w *jsonWalker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\r', '\n':
			w.i++
		default:
			return
		}
	}
}

// member moves past the '{' or ',' before the next member of an object and
// reports whether there is one; the walker then stands at its key.
func (w *jsonWalker) member() bool { return w.next('{') }

// element is member for arrays; the walker then stands at the element.
func (w *jsonWalker) element() bool { return w.next('[') }

func (w *jsonWalker) next(open byte) bool {
	w.space()
	if c := w.b[w.i]; c == open || c == ',' {
		w.i++
		w.space()
	}
	return w.b[w.i] != '}' && w.b[w.i] != ']'
}

// key reads an object key and the colon after it.
func (w *jsonWalker) key() []byte {
	raw := w.value()
	k := raw[1 : len(raw)-1]
	if bytes.IndexByte(raw, '\\') >= 0 {
		var u string
		if json.Unmarshal(raw, &u) == nil {
			k = []byte(u)
		}
	}
	w.space()
	w.i++ // ':'
	w.space()
	return k
}

// value returns the text of the value at the walker and moves past it.
func (w *jsonWalker) value() []byte {
	start := w.i
	depth := 0
	for ; w.i < len(w.b); w.i++ {
		switch c := w.b[w.i]; c {
		case '"':
			for w.i++; w.b[w.i] != '"'; w.i++ {
				if w.b[w.i] == '\\' {
					w.i++
				}
			}
			if depth == 0 {
				w.i++
				return w.b[start:w.i]
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return w.b[start:w.i]
			}
			if depth--; depth == 0 {
				w.i++
				return w.b[start:w.i]
			}
		case ',', ' ', '\t', '\r', '\n', ':':
			if depth == 0 {
				return w.b[start:w.i]
			}
		}
	}
	return w.b[start:w.i]
}

// show returns a value for a message, cut to 40 bytes.
func show(v []byte) string { return cut(v, 40) }

// cut returns v as a string, cut to at most limit bytes (at a character
// boundary) and marked with "…" when cut.
func cut(v []byte, limit int) string {
	if len(v) > limit {
		n := limit
		for n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
		return string(v[:n]) + "…"
	}
	return string(v)
}
