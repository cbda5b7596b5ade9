package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/parquet-go/parquet-go"
)

// requestColumns reads requests.parquet column by column, straight from
// its pages into event.Rows: no per-row reflection, which makes reading
// the export as fast as replaying the journal (see BenchmarkReport1M).
// Export starts a row group per run, so a row group holds one run's rows
// (a run past rowGroupRows spans several).
type requestColumns struct {
	f    *os.File
	pf   *parquet.File
	rgs  []parquet.RowGroup
	next int // the next row group to read
	col  map[string]int
	dict map[parquet.Dictionary][]string
}

// requestColumnNames are the columns ReadExport needs.
var requestColumnNames = []string{"run", "req", "class", "scheduled_ns", "arrival_ns", "admit_ns", "prefill_inst", "decode_inst",
	"crossed", "first_token_ns", "end_ns", "input_tokens", "want_tokens", "output_tokens", "cached_tokens",
	"terminal", "cause", "reference", "response"}

// optionalColumnNames are columns an export may lack: those added after
// the export format's first release (preemptions, spilled), read as 0 or
// false when absent.
var optionalColumnNames = []string{"preemptions", "spilled"}

func openRequestColumns(path string) (*requestColumns, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", RequestsFile, err)
	}
	rc := &requestColumns{f: f, pf: pf, rgs: pf.RowGroups(), col: map[string]int{}, dict: map[parquet.Dictionary][]string{}}
	names := append(append([]string(nil), requestColumnNames...), optionalColumnNames...)
	for i, name := range names {
		leaf, ok := pf.Schema().Lookup(name)
		switch {
		case !ok && i >= len(requestColumnNames):
			continue // an optional column this export lacks
		case !ok:
			f.Close()
			return nil, fmt.Errorf("%s: no column %q", RequestsFile, name)
		case leaf.Node.Optional() || leaf.Node.Repeated():
			f.Close()
			return nil, fmt.Errorf("%s: column %q is not required", RequestsFile, name)
		}
		rc.col[name] = leaf.ColumnIndex
	}
	return rc, nil
}

func (rc *requestColumns) close() { rc.f.Close() }

// peekRun returns the run of the next non-empty row group; ok is false
// when none is left.
func (rc *requestColumns) peekRun() (string, bool, error) {
	for rc.next < len(rc.rgs) && rc.rgs[rc.next].NumRows() == 0 {
		rc.next++
	}
	if rc.next >= len(rc.rgs) {
		return "", false, nil
	}
	var name string
	first := true
	err := rc.strings(rc.rgs[rc.next], "run", func(i int, s string) error {
		if first {
			name, first = s, false
		} else if s != name {
			return fmt.Errorf("row group %d holds runs %q and %q: expected one run per row group", rc.next, name, s)
		}
		return nil
	})
	return name, true, err
}

// appendRun decodes the next row group into rows (appended) and returns
// them; first is the number of the run's rows before this group (its
// first request is first+1); partial accepts requests that never ended.
func (rc *requestColumns) appendRun(rows []event.Row, first int, run string, partial bool) ([]event.Row, error) {
	rg := rc.rgs[rc.next]
	rc.next++
	base := len(rows)
	n := int(rg.NumRows())
	rows = slices.Grow(rows, n)[:base+n]
	r := rows[base:]
	clear(r)
	ints := []struct {
		name string
		set  func(*event.Row, int64)
	}{
		{"req", func(x *event.Row, v int64) { x.Req = event.RequestID(v) }},
		{"scheduled_ns", func(x *event.Row, v int64) { x.Scheduled = timeOf(v) }},
		{"arrival_ns", func(x *event.Row, v int64) { x.Arrival = timeOf(v) }},
		{"admit_ns", func(x *event.Row, v int64) { x.Admit = timeOf(v) }},
		{"first_token_ns", func(x *event.Row, v int64) { x.FirstToken = timeOf(v) }},
		{"end_ns", func(x *event.Row, v int64) { x.End = timeOf(v) }},
		{"input_tokens", func(x *event.Row, v int64) { x.InputTokens = v }},
		{"want_tokens", func(x *event.Row, v int64) { x.WantOutput = v }},
		{"output_tokens", func(x *event.Row, v int64) { x.OutputTokens = v }},
		{"cached_tokens", func(x *event.Row, v int64) { x.CachedTokens = v }},
		{"prefill_inst", func(x *event.Row, v int64) { x.PrefillInst = event.Instance(v) }},
		{"decode_inst", func(x *event.Row, v int64) { x.DecodeInst = event.Instance(v) }},
		{"preemptions", func(x *event.Row, v int64) { x.Preemptions = v }},
	}
	for _, c := range ints {
		if _, ok := rc.col[c.name]; !ok {
			continue // an optional column this export lacks: 0
		}
		if err := rc.ints(rg, c.name, func(i int, v int64) { c.set(&r[i], v) }); err != nil {
			return rows, err
		}
	}
	if err := rc.bools(rg, "crossed", func(i int, v bool) { r[i].Crossed = v }); err != nil {
		return rows, err
	}
	if _, ok := rc.col["spilled"]; ok {
		if err := rc.bools(rg, "spilled", func(i int, v bool) { r[i].Spilled = v }); err != nil {
			return rows, err
		}
	}
	strs := []struct {
		name string
		set  func(*event.Row, string) error
	}{
		{"class", func(x *event.Row, s string) error { x.Class = s; return nil }},
		{"reference", func(x *event.Row, s string) error { x.Reference = s; return nil }},
		{"response", func(x *event.Row, s string) error { x.Response = s; return nil }},
		{"terminal", func(x *event.Row, s string) error {
			k, ok := kindByName[s]
			if !ok || !(event.Kind(k).Terminal() || partial && event.Kind(k) == event.KindNone) {
				return fmt.Errorf("request %d: terminal %q: expected finish, refuse, expire or fail", x.Req, s)
			}
			x.Terminal = event.Kind(k)
			return nil
		}},
		{"cause", func(x *event.Row, s string) error {
			c, ok := causeByName[s]
			if !ok {
				return fmt.Errorf("request %d: unknown cause %q", x.Req, s)
			}
			x.Cause = event.Cause(c)
			return nil
		}},
	}
	for _, c := range strs {
		if err := rc.strings(rg, c.name, func(i int, s string) error { return c.set(&r[i], s) }); err != nil {
			return rows, err
		}
	}
	for i := range r {
		if want := event.RequestID(first + i + 1); r[i].Req != want {
			return rows, fmt.Errorf("run %s: request %d where %d was expected (rows must be dense and in order)", run, r[i].Req, want)
		}
	}
	return rows, nil
}

// pages walks a column chunk's pages, checking that they hold exactly the
// row group's rows and no nulls.
func (rc *requestColumns) pages(rg parquet.RowGroup, name string, fn func(p parquet.Page, at int) error) error {
	pages := rg.ColumnChunks()[rc.col[name]].Pages()
	defer pages.Close()
	at := 0
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: column %s: %w", RequestsFile, name, err)
		}
		n := int(p.NumValues())
		if p.NumNulls() != 0 || at+n > int(rg.NumRows()) {
			parquet.Release(p)
			return fmt.Errorf("%s: column %s: a page of %d values (%d null) past row %d of %d", RequestsFile, name, n, p.NumNulls(), at, rg.NumRows())
		}
		err = fn(p, at)
		parquet.Release(p)
		if err != nil {
			return fmt.Errorf("%s: %w", RequestsFile, err)
		}
		at += n
	}
	if at != int(rg.NumRows()) {
		return fmt.Errorf("%s: column %s: %d values for %d rows", RequestsFile, name, at, rg.NumRows())
	}
	return nil
}

func (rc *requestColumns) ints(rg parquet.RowGroup, name string, set func(i int, v int64)) error {
	var buf []int64
	return rc.pages(rg, name, func(p parquet.Page, at int) error {
		d := p.Data()
		switch p.Type().Kind() {
		case parquet.Int64:
			for i, v := range d.Int64() {
				set(at+i, v)
			}
		case parquet.Int32:
			for i, v := range d.Int32() {
				set(at+i, int64(v))
			}
		default:
			// Not a plain page of integers: read its values generically.
			r, ok := p.Values().(parquet.Int64Reader)
			if !ok {
				return fmt.Errorf("column %s: %s values, expected integers", name, p.Type())
			}
			if cap(buf) < int(p.NumValues()) {
				buf = make([]int64, p.NumValues())
			}
			n, err := r.ReadInt64s(buf[:p.NumValues()])
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			for i, v := range buf[:n] {
				set(at+i, v)
			}
		}
		return nil
	})
}

func (rc *requestColumns) bools(rg parquet.RowGroup, name string, set func(i int, v bool)) error {
	var buf []bool
	return rc.pages(rg, name, func(p parquet.Page, at int) error {
		r, ok := p.Values().(parquet.BooleanReader)
		if !ok {
			return fmt.Errorf("column %s: %s values, expected booleans", name, p.Type())
		}
		if cap(buf) < int(p.NumValues()) {
			buf = make([]bool, p.NumValues())
		}
		n, err := r.ReadBooleans(buf[:p.NumValues()])
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for i, v := range buf[:n] {
			set(at+i, v)
		}
		return nil
	})
}

// strings reads a byte-array column, dictionary-encoded (the dictionary is
// converted to strings once per column chunk) or plain.
func (rc *requestColumns) strings(rg parquet.RowGroup, name string, set func(i int, s string) error) error {
	return rc.pages(rg, name, func(p parquet.Page, at int) error {
		if p.Type().Kind() != parquet.ByteArray {
			return fmt.Errorf("column %s: %s values, expected strings", name, p.Type())
		}
		if d := p.Dictionary(); d != nil {
			names, ok := rc.dict[d]
			if !ok {
				names = make([]string, d.Len())
				for i := range names {
					names[i] = string(d.Index(int32(i)).ByteArray())
				}
				rc.dict[d] = names
			}
			d := p.Data()
			for i, k := range d.Int32() {
				if k < 0 || int(k) >= len(names) {
					return fmt.Errorf("column %s: dictionary index %d of %d", name, k, len(names))
				}
				if err := set(at+i, names[k]); err != nil {
					return err
				}
			}
			return nil
		}
		d := p.Data()
		data, offsets := d.ByteArray()
		n := int(p.NumValues())
		if len(offsets) < n+1 {
			return fmt.Errorf("column %s: %d offsets for %d values", name, len(offsets), n)
		}
		for i := 0; i < n; i++ {
			var s string
			if offsets[i+1] > offsets[i] {
				s = string(data[offsets[i]:offsets[i+1]])
			}
			if err := set(at+i, s); err != nil {
				return err
			}
		}
		return nil
	})
}
