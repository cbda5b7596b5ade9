package traces

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Shared machinery of the importers (mooncake.go, azure.go): a line reader
// with limits, an error list that names file, line and column, and the
// conversion of parsed rows into a sorted segment.

// maxImportErrors bounds the problems reported for one file; the rest are
// counted.
const maxImportErrors = 10

// importErrors collects the problems of one file.
type importErrors struct {
	source string
	errs   []error
	more   int
}

// at records a problem at line (1-based) and col (1-based; 0 = unknown).
func (e *importErrors) at(line, col int, format string, args ...any) {
	if len(e.errs) >= maxImportErrors {
		e.more++
		return
	}
	loc := fmt.Sprintf("%s:%d", e.source, line)
	if col > 0 {
		loc += fmt.Sprintf(":%d", col)
	}
	e.errs = append(e.errs, fmt.Errorf("%s: %s", loc, fmt.Sprintf(format, args...)))
}

// file records a problem of the whole file.
func (e *importErrors) file(format string, args ...any) {
	if len(e.errs) >= maxImportErrors {
		e.more++
		return
	}
	e.errs = append(e.errs, fmt.Errorf("%s: %s", e.source, fmt.Sprintf(format, args...)))
}

func (e *importErrors) failed() bool { return len(e.errs) > 0 }

func (e *importErrors) err() error {
	if len(e.errs) == 0 {
		return nil
	}
	errs := e.errs
	if e.more > 0 {
		errs = append(errs[:len(errs):len(errs)], fmt.Errorf("%s: %d more problems not shown", e.source, e.more))
	}
	return errors.Join(errs...)
}

// lineReader reads the lines of an imported file, without their "\n" or
// "\r\n", and with a UTF-8 byte order mark removed from the first line.
type lineReader struct {
	sc   *bufio.Scanner
	cnt  *countingReader
	line int // number of the line last returned, 1-based
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func newLineReader(r io.Reader) *lineReader {
	cnt := &countingReader{r: io.LimitReader(r, MaxImportBytes+1)}
	sc := bufio.NewScanner(cnt)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	return &lineReader{sc: sc, cnt: cnt}
}

var utf8BOM = []byte("\xef\xbb\xbf")

// next returns the next line; it is valid until the following call.
func (lr *lineReader) next() ([]byte, bool) {
	if !lr.sc.Scan() {
		return nil, false
	}
	lr.line++
	b := lr.sc.Bytes()
	if lr.line == 1 {
		b = bytes.TrimPrefix(b, utf8BOM)
	}
	return b, true
}

// check records why reading stopped early, if it did.
func (lr *lineReader) check(errs *importErrors) {
	switch err := lr.sc.Err(); {
	case lr.cnt.n > MaxImportBytes:
		errs.file("file is larger than %d bytes: expected at most %d", int64(MaxImportBytes), int64(MaxImportBytes))
	case errors.Is(err, bufio.ErrTooLong):
		errs.at(lr.line+1, 0, "line longer than %d bytes: expected at most %d", MaxLineBytes, MaxLineBytes)
	case err != nil:
		errs.file("%v", err)
	}
}

// blank reports whether a line holds only spaces and tabs.
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' {
			return false
		}
	}
	return true
}

// row is one parsed request of an imported file. It holds no pointers, so
// a file's rows are one flat allocation the collector need not scan.
type row struct {
	at         int64 // arrival, ns on the file's own clock
	in, out    int32 // prompt and output tokens, in [1, MaxTokens]
	ids, idEnd int32 // the row's Mooncake hash_ids are pool[ids:idEnd]; ids < 0 for none
}

// rowsFor returns an empty row slice with room for the rows a file of
// size bytes probably holds, at about perRow bytes a row.
func rowsFor(size int64, perRow int64) []row {
	return make([]row, 0, min(max(size/perRow, 0)+16, MaxRequests))
}

// rowReader reads the rows of one imported file in file order (azureReader,
// mooncakeReader). The same reader serves the validating pass at Open, the
// in-memory import (readSegment) and a Stream re-reading the file.
type rowReader interface {
	// next stores the next good row in rw and reports true, or reports
	// false at the end of the file or when reading must stop. The problems
	// of a bad row are recorded in the reader's errors and the row is
	// skipped; a strict reader stops at the first problem instead.
	next(rw *row) bool
	// ids is the hash_ids of the row last returned, nil when it has none;
	// valid until the following call of next.
	ids() []int64
	// finish records why reading stopped early, if it did, and the
	// problems of the file as a whole, and returns the file's notes (what
	// the importer changed or ignored). Call it once, after next reported
	// false.
	finish() []string
	// lineNo is the number of the line last read, 1-based.
	lineNo() int
}

// rowScan is the state every rowReader shares.
type rowScan struct {
	lr     *lineReader
	errs   *importErrors
	strict bool // stop at the first problem (a Stream re-reading a checked file)
	n      int  // good rows returned
	done   bool
}

func (s *rowScan) lineNo() int { return s.lr.line }

// stop reports whether reading must stop before the next line.
func (s *rowScan) stop() bool { return s.done || s.strict && s.errs.failed() }

// counted counts a good row and reports false, recording why, when the
// file holds too many.
func (s *rowScan) counted() bool {
	if s.n++; s.n > MaxRequests {
		s.errs.at(s.lr.line, 0, "more than %d requests: expected at most %d", MaxRequests, MaxRequests)
		s.done = true
		return false
	}
	return true
}

// newRowReader returns the reader of format f (FormatAzure or
// FormatMooncake) over r, recording problems in errs.
func newRowReader(f string, r io.Reader, errs *importErrors, strict bool) rowReader {
	sc := rowScan{lr: newLineReader(r), errs: errs, strict: strict}
	if f == FormatMooncake {
		return newMooncakeReader(sc)
	}
	return &azureReader{rowScan: sc}
}

// readSegment reads every row of rd into memory and builds the segment
// (rows sorted, requests made): the import of a file that is not streamed
// from disk (see importFile). size is the file's size in bytes (0 if
// unknown; it only sizes buffers) and perRow about the bytes of a row.
func readSegment(rd rowReader, errs *importErrors, size, perRow int64, class string, index int) (seg *segment, err error) {
	defer func() {
		if p := recover(); p != nil {
			seg, err = nil, fmt.Errorf("%s: cannot import: internal error: %v", errs.source, p)
		}
	}()
	rows := rowsFor(size, perRow)
	var pool []int64 // hash_ids of all rows
	var rw row
	for rd.next(&rw) {
		if ids := rd.ids(); ids != nil {
			rw.ids = int32(len(pool))
			pool = append(pool, ids...)
			rw.idEnd = int32(len(pool))
		}
		rows = append(rows, rw)
	}
	notes := rd.finish()
	if errs.failed() {
		return nil, errs.err()
	}
	return buildSegment(rows, pool, errs, class, index, notes)
}

// descentNote is the note of a file with descents rows earlier than the
// row before them.
func descentNote(source string, descents int) string {
	return fmt.Sprintf("%s: %d rows earlier than the row before them: rows sorted by time (stable)", source, descents)
}

// buildSegment sorts rows stably by time, checks the span, and turns them
// into requests relative to the first arrival, with shared prefixes mapped
// from hash_ids (see prefixMapper). pool holds the hash_ids of all rows;
// index is the file's position in the concatenation.
func buildSegment(rows []row, pool []int64, errs *importErrors, class string, index int, notes []string) (*segment, error) {
	if len(rows) == 0 {
		errs.file("no requests: expected at least one row")
		return nil, errs.err()
	}
	descents := 0
	for i := 1; i < len(rows); i++ {
		if rows[i].at < rows[i-1].at {
			descents++
		}
	}
	if descents > 0 {
		slices.SortStableFunc(rows, func(a, b row) int {
			switch {
			case a.at < b.at:
				return -1
			case a.at > b.at:
				return 1
			}
			return 0
		})
		notes = append(notes, descentNote(errs.source, descents))
	}
	seg, err := newSegment(errs, class, len(rows), rows[0].at, rows[len(rows)-1].at, notes)
	if err != nil {
		return nil, err
	}
	seg.reqs = make([]Request, len(rows))
	conv := newRowConverter(seg, index, len(pool))
	for i := range rows {
		r := &rows[i]
		var ids []int64
		if r.ids >= 0 {
			ids = pool[r.ids:r.idEnd]
		}
		seg.reqs[i] = conv.request(r, ids)
	}
	return seg, nil
}

// newSegment checks the span of a file of n rows whose arrivals run from
// first to last (ns, the file's clock) and returns its segment, without
// requests: its mean gap, its last arrival and its notes.
func newSegment(errs *importErrors, class string, n int, first, last int64, notes []string) (*segment, error) {
	if n == 0 {
		errs.file("no requests: expected at least one row")
		return nil, errs.err()
	}
	span := last - first // both within ±2^62, so no overflow
	if span > int64(MaxDuration) {
		errs.file("arrivals span %v: expected at most %v", time.Duration(span), MaxDuration)
		return nil, errs.err()
	}
	seg := &segment{class: class, n: n, first: first, last: event.Time(span), notes: notes}
	seg.gap = SingleSegmentGap
	if k := int64(n) - 1; k > 0 && span > 0 {
		seg.gap = event.Time(max((span+k/2)/k, 1))
	}
	if d := event.Time(span) + seg.gap; d > event.Time(MaxDuration) {
		errs.file("lasts %v (arrivals over %v, then one mean gap): expected at most %v",
			time.Duration(d), time.Duration(span), MaxDuration)
		return nil, errs.err()
	}
	return seg, nil
}

// rowConverter turns a segment's rows, in time order, into requests: At
// relative to the file's first arrival, and Mooncake hash_ids mapped to
// prefix groups as they come (the mapping depends only on the rows before,
// so the import and a stream of the same file agree).
type rowConverter struct {
	class string
	first int64
	index int
	pm    *prefixMapper // made at the first row with hash_ids
	ids   int           // hash_ids to size the mapper for
}

// newRowConverter returns the rowConverter of seg, the index-th file of a
// concatenation; ids sizes the prefix mapper (0: grow as needed).
func newRowConverter(seg *segment, index, ids int) *rowConverter {
	return &rowConverter{class: seg.class, first: seg.first, index: index, ids: ids}
}

func (c *rowConverter) request(r *row, ids []int64) Request {
	req := Request{At: event.Time(r.at - c.first), Class: c.class, InputTokens: int(r.in), OutputTokens: int(r.out)}
	if ids != nil {
		if c.pm == nil {
			c.pm = newPrefixMapper(c.index, c.ids)
		}
		req.PrefixGroup, req.PrefixTokens, req.CacheGroup, req.CacheTokens = c.pm.add(ids, req.InputTokens)
	}
	return req
}

// prefixMapper maps Mooncake hash_ids to prefix groups. It keeps a trie of
// every leading block sequence seen so far in the file; a request's shared
// prefix is the longest leading run of its hash_ids that is a trie path,
// that is, that some earlier request also started with. Each trie node
// carries a chained SplitMix64 hash of the file index and the block IDs on
// its path, which names the group.
type prefixMapper struct {
	child map[trieKey]int32
	hash  []uint64 // per node; node 0 is the root
}

type trieKey struct {
	parent int32
	id     int64
}

// newPrefixMapper returns a mapper for the index-th file of a
// concatenation, sized for up to ids blocks.
func newPrefixMapper(index, ids int) *prefixMapper {
	h := make([]uint64, 1, ids+1)
	h[0] = mix64(streamPrefix ^ mix64(uint64(index)))
	return &prefixMapper{child: make(map[trieKey]int32, ids), hash: h}
}

// add returns the group and prefix length of a request with the given
// hash_ids and input length, and the group and length it leaves cached:
// its path of full blocks (the blocks an engine caches, as vLLM does; the
// last block is partial unless the prompt fills it), which is the shared
// prefix of a later turn of its conversation. It records the request's
// block sequence.
func (pm *prefixMapper) add(ids []int64, input int) (group int64, tokens int, cgroup int64, ctokens int) {
	full := min(len(ids), input/MooncakeBlockTokens) // full blocks
	node, shared, own := int32(0), 0, int32(0)
	for shared < len(ids) {
		c, ok := pm.child[trieKey{node, ids[shared]}]
		if !ok {
			break
		}
		node, shared = c, shared+1
		if shared == full {
			own = c
		}
	}
	at := node
	for k, id := range ids[shared:] {
		n := int32(len(pm.hash))
		pm.hash = append(pm.hash, mix64(pm.hash[at]^mix64(uint64(id))))
		pm.child[trieKey{at, id}] = n
		at = n
		if shared+k+1 == full {
			own = n
		}
	}
	group, tokens = pm.group(node), min(shared*MooncakeBlockTokens, input-1)
	if tokens < 1 {
		group, tokens = 0, 0
	}
	if ctokens = min(full*MooncakeBlockTokens, input-1); ctokens >= 1 && own != 0 {
		cgroup = pm.group(own)
	} else {
		ctokens = 0
	}
	return group, tokens, cgroup, ctokens
}

// group is the prefix group that names trie node n: its chained hash,
// never 0.
func (pm *prefixMapper) group(n int32) int64 {
	g := int64(pm.hash[n] >> 1)
	if g == 0 {
		g = 1
	}
	return g
}
