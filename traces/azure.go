package traces

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Azure LLM inference trace (2023) CSV:
//
//	TIMESTAMP,ContextTokens,GeneratedTokens
//	2023-11-16 18:15:46.6805900,374,44
//
// The header names the three columns, case-sensitively, in any order and
// each exactly once. Fields are not quoted and not padded.

// Column names of the Azure CSV.
const (
	azureTime   = "TIMESTAMP"
	azureInput  = "ContextTokens"
	azureOutput = "GeneratedTokens"
)

// Years accepted in an Azure TIMESTAMP.
const (
	minAzureYear = 1900
	maxAzureYear = 2200
)

const azureTimeWant = "expected a time like 2023-11-16 18:15:46.6805900 or 2024-05-10 00:00:00.009930+00:00 (YYYY-MM-DD hh:mm:ss, optionally a fraction of 1 to 9 digits, then optionally an offset: Z, +hh:mm or -hh:mm)"

// parseAzure reads an Azure CSV file of size bytes (0 if unknown; it only
// sizes buffers) into memory. source names the file in errors, class is
// the class of its requests and index its position in a concatenation.
func parseAzure(r io.Reader, size int64, source, class string, index int) (*segment, error) {
	errs := &importErrors{source: source}
	return readSegment(newRowReader(FormatAzure, r, errs, false), errs, size, 36, class, index)
}

// azureReader reads the rows of an Azure CSV file (see rowReader).
type azureReader struct {
	rowScan
	col             [3]int // field index of TIMESTAMP, ContextTokens, GeneratedTokens
	header          bool
	zeroIn, zeroOut int
	fields          [3][]byte
	starts          [3]int
}

func (a *azureReader) ids() []int64 { return nil }

func (a *azureReader) next(out *row) bool {
	errs := a.errs
	for !a.stop() {
		line, ok := a.lr.next()
		if !ok {
			a.done = true
			break
		}
		if blank(line) {
			continue
		}
		if !a.header {
			if !azureHeader(line, &a.col) {
				errs.at(a.lr.line, 0, "header %s: expected the columns %s, %s, %s (in any order, each once)",
					strconv.Quote(cut(line, 100)), azureTime, azureInput, azureOutput)
				a.done = true
				break
			}
			a.header = true
			continue
		}
		n := splitCSV(line, &a.fields, &a.starts)
		if n != 3 {
			errs.at(a.lr.line, 0, "%d fields: expected 3 (%s)", n, headerText(a.col))
			continue
		}
		rw := row{ids: -1}
		good := true
		ts, tcol := a.fields[a.col[0]], a.col[0]
		if at, ok := parseAzureTime(ts); ok {
			rw.at = at
		} else {
			errs.at(a.lr.line, a.starts[tcol]+1, "%s: %s: %s", azureTime, strconv.Quote(show(ts)), azureTimeWant)
			good = false
		}
		for i, name := range [...]string{azureInput, azureOutput} {
			f := a.fields[a.col[i+1]]
			v, ok := parseCount(f)
			if !ok {
				errs.at(a.lr.line, a.starts[a.col[i+1]]+1, "%s: %s: expected an integer in [0, %d]", name, strconv.Quote(show(f)), MaxTokens)
				good = false
				continue
			}
			if v == 0 {
				v = 1
				if i == 0 {
					a.zeroIn++
				} else {
					a.zeroOut++
				}
			}
			if i == 0 {
				rw.in = int32(v)
			} else {
				rw.out = int32(v)
			}
		}
		if !good {
			continue
		}
		if !a.counted() {
			break
		}
		*out = rw
		return true
	}
	return false
}

func (a *azureReader) finish() []string {
	a.lr.check(a.errs)
	if !a.header && !a.errs.failed() {
		a.errs.file("no header: expected a first line %s,%s,%s", azureTime, azureInput, azureOutput)
	}
	var notes []string
	if a.zeroIn > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d rows with %s 0: input set to 1 token", a.errs.source, a.zeroIn, azureInput))
	}
	if a.zeroOut > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d rows with %s 0: output set to 1 token", a.errs.source, a.zeroOut, azureOutput))
	}
	return notes
}

// azureHeader checks a header line and sets col to the field index of each
// column.
func azureHeader(line []byte, col *[3]int) bool {
	var fields [3][]byte
	var starts [3]int
	if splitCSV(line, &fields, &starts) != 3 {
		return false
	}
	seen := 0
	for i, f := range fields {
		var k int
		switch string(f) {
		case azureTime:
			k = 0
		case azureInput:
			k = 1
		case azureOutput:
			k = 2
		default:
			return false
		}
		if seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		col[k] = i
	}
	return true
}

// headerText is the header with columns in the file's order.
func headerText(col [3]int) string {
	names := make([]string, 3)
	for k, name := range [...]string{azureTime, azureInput, azureOutput} {
		names[col[k]] = name
	}
	return strings.Join(names, ",")
}

// splitCSV splits line at commas into at most three fields and returns the
// number of fields found (which may exceed three); starts holds each
// field's byte offset.
func splitCSV(line []byte, fields *[3][]byte, starts *[3]int) int {
	n, start := 0, 0
	for i := 0; i <= len(line); i++ {
		if i < len(line) && line[i] != ',' {
			continue
		}
		if n < 3 {
			fields[n], starts[n] = line[start:i], start
		}
		n++
		start = i + 1
	}
	return n
}

// parseCount parses a token count in [0, MaxTokens]: decimal digits only.
func parseCount(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v = v*10 + int(c-'0'); v > MaxTokens {
			return 0, false
		}
	}
	return v, true
}

// parseAzureTime parses "YYYY-MM-DD hh:mm:ss[.f…][offset]" to nanoseconds
// since the Unix epoch. The fraction has 1 to 9 digits and is read as an
// integer, so no precision is lost. The 2023 traces carry no offset (UTC
// is assumed; only differences matter); the 2024 ones end in "+00:00":
// an offset, "Z" or ±hh:mm (or ±hhmm), is applied.
func parseAzureTime(b []byte) (int64, bool) {
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || b[10] != ' ' || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	num := func(s []byte) (int, bool) {
		v := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	minute, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		year < minAzureYear || year > maxAzureYear || month < 1 || month > 12 || day < 1 ||
		hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	rest := b[19:]
	offset := 0 // seconds east of UTC
	if k := bytes.IndexAny(rest, "Z+-"); k >= 0 {
		zone := rest[k:]
		rest = rest[:k]
		switch {
		case len(zone) == 1 && zone[0] == 'Z':
		case len(zone) == 6 && zone[3] == ':' || len(zone) == 5:
			hh, okh := num(zone[1:3])
			mm, okm := num(zone[len(zone)-2:])
			if !okh || !okm || hh > 23 || mm > 59 || zone[0] == 'Z' {
				return 0, false
			}
			offset = hh*3600 + mm*60
			if zone[0] == '-' {
				offset = -offset
			}
		default:
			return 0, false
		}
	}
	ns := 0
	if frac := rest; len(frac) > 0 {
		digits := frac[1:]
		if frac[0] != '.' || len(digits) < 1 || len(digits) > 9 {
			return 0, false
		}
		v, ok := num(digits)
		if !ok {
			return 0, false
		}
		for range 9 - len(digits) {
			v *= 10
		}
		ns = v
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, ns, time.UTC)
	if t.Day() != day { // February 30 and the like roll over
		return 0, false
	}
	return t.UnixNano() - int64(offset)*int64(time.Second), true
}
