package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/parquet-go/parquet-go"
)

// ExportedRun is one run read back from a Parquet export: its metadata
// from runs.parquet, its requests from requests.parquet folded back into
// event.Rows, and its role moves from role_moves.parquet.
//
// What the export does not keep is not here: Meta.Schema is
// event.SchemaVersion (the export was written by a reader of that schema).
type ExportedRun struct {
	Name    string // the run's directory name (the tables' run column)
	Meta    event.RunMeta
	Records int64       // records in the run's journal, run metadata included
	Rows    []event.Row // one per offered request, indexed by RequestID-1
	Moves   []RoleMove  // in record order; Seq is 0 (the export keeps none)
	// Partial says why the run is not whole ("" when it is); see
	// ExportOptions.Partial.
	Partial string
}

// ReadExportOptions tune ReadExportWith.
type ReadExportOptions struct {
	// Partial accepts runs exported as partial; without it such a run is
	// an error naming it.
	Partial bool
}

// IsExport reports whether dir looks like a Parquet export: it holds
// manifest.json or any of the five tables. Like IsJournal it reads
// nothing; ReadExport validates the files (a table or the manifest
// missing is an error there, not a reason to look elsewhere).
func IsExport(dir string) bool {
	for _, name := range append([]string{ManifestFile}, TableFiles...) {
		st, err := os.Stat(filepath.Join(dir, name))
		if err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// ReadExport reads the Parquet export in dir (as written by Export) and
// calls fn once per run, in the order of runs.parquet. Requests are read
// in chunks and one run's rows are held at a time: run.Rows is reused
// after fn returns, so fn must copy what it keeps. It is ReadExportWith
// with no options: a run exported as partial is an error.
func ReadExport(dir string, fn func(run *ExportedRun) error) error {
	return ReadExportWith(dir, ReadExportOptions{}, fn)
}

// ReadExportWith is ReadExport with options. Before reading any row it
// checks every table against manifest.json (present, same size, same
// SHA-256), so a missing table, a truncated or altered file, or an
// export interrupted while it was written is an error naming the file,
// never a smaller result. A run whose request rows are not dense and in
// order, or a name the event package does not know, is an error naming the
// file too. It never panics on bad input: a panic inside the Parquet
// reader comes back as an error.
func ReadExportWith(dir string, o ReadExportOptions, fn func(run *ExportedRun) error) error {
	var all []event.Row
	return ReadExportEach(dir, o, func(run *ExportedRun, rows RunRows) error {
		clear(all)
		all = all[:0]
		if err := rows(func(chunk []event.Row) error {
			all = append(all, chunk...)
			return nil
		}); err != nil {
			return err
		}
		run.Rows = all
		return fn(run)
	})
}

// RunRows passes one run's request rows to yield, a row group at a time
// (up to 2^17 rows), in request order; the slice is reused once yield
// returns. It returns yield's first error, or, once the run's last row
// group is read, an error if the rows are fewer or more than runs.parquet
// says were offered: a damaged export is never read as a smaller run. It
// may be called once.
type RunRows func(yield func(rows []event.Row) error) error

// ReadExportEach is ReadExportWith without holding a run's rows: fn gets
// each run (its Rows nil) and rows, which streams them, so memory holds a
// row group, not a run. A run whose rows fn did not read is still checked
// before the next run.
func ReadExportEach(dir string, o ReadExportOptions, fn func(run *ExportedRun, rows RunRows) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("export %s: reading Parquet: %v", dir, v)
		}
	}()
	if err := checkManifest(dir); err != nil {
		return fmt.Errorf("export %s: %w", dir, err)
	}
	runs, err := readAll[runRow](filepath.Join(dir, RunsFile))
	if err != nil {
		return fmt.Errorf("export %s: %w", dir, err)
	}
	moves := map[string][]RoleMove{}
	mrows, err := readAll[roleMoveRow](filepath.Join(dir, RoleMovesFile))
	if err != nil {
		return fmt.Errorf("export %s: %w", dir, err)
	}
	for i := range mrows {
		m, err := roleMoveOf(&mrows[i])
		if err != nil {
			return fmt.Errorf("export %s: %s row %d: %w", dir, RoleMovesFile, i, err)
		}
		moves[mrows[i].Run] = append(moves[mrows[i].Run], m)
	}
	known := make(map[string]bool, len(runs))
	for _, r := range runs {
		if known[r.Run] {
			return fmt.Errorf("export %s: %s: run %q appears twice", dir, RunsFile, r.Run)
		}
		known[r.Run] = true
	}
	for name := range moves {
		if !known[name] {
			return fmt.Errorf("export %s: %s names run %q, which %s does not list", dir, RoleMovesFile, name, RunsFile)
		}
	}

	reqs, err := openRequestColumns(filepath.Join(dir, RequestsFile))
	if err != nil {
		return fmt.Errorf("export %s: %w", dir, err)
	}
	defer reqs.close()
	var run ExportedRun
	var buf []event.Row
	for i := range runs {
		rr := &runs[i]
		if rr.Partial != "" && !o.Partial {
			return &IncompleteError{Dir: dir, Run: rr.Run, Missing: "the rest of the run", Reason: rr.Partial}
		}
		run.Name = rr.Run
		run.Partial = rr.Partial
		run.Records = rr.Records
		run.Meta = event.RunMeta{Schema: event.SchemaVersion, Version: rr.Version, Driver: rr.Driver, Arm: rr.Arm,
			Rate: rr.Rate, Seed: rr.Seed, Trace: rr.Trace, TraceHash: rr.TraceHash, Fleet: rr.Fleet,
			ConfigHash: rr.ConfigHash, Instances: int(rr.Instances), GPUs: int(rr.GPUs),
			TTFTSLO: rr.TTFTSLOs, TPOTSLO: rr.TPOTSLOs, StartUnixNano: rr.StartUnixNano,
			Target: rr.Target, Replay: rr.Replay, Partial: rr.Interrupted, Planned: int(rr.Planned), Sent: int(rr.Sent),
			LagP50: rr.LagP50s, LagP90: rr.LagP90s, LagP99: rr.LagP99s, Degraded: rr.Degraded,
			PrefixCache: rr.PrefixCache, Cordons: rr.Cordons}
		run.Moves = moves[rr.Run]
		read := false
		rows := func(yield func([]event.Row) error) error {
			if read {
				return fmt.Errorf("export %s: run %s: its rows were already read", dir, rr.Run)
			}
			read = true
			n := 0
			for {
				name, ok, err := reqs.peekRun()
				if err != nil {
					return fmt.Errorf("export %s: %s: %w", dir, RequestsFile, err)
				}
				if !ok || name != rr.Run {
					break
				}
				if buf, err = reqs.appendRun(buf[:0], n, rr.Run, rr.Partial != ""); err != nil {
					return fmt.Errorf("export %s: %s: run %s: %w", dir, RequestsFile, rr.Run, err)
				}
				n += len(buf)
				if err := yield(buf); err != nil {
					return err
				}
			}
			clear(buf) // drop the texts' references
			if int64(n) != rr.Offered {
				return fmt.Errorf("export %s: run %s: %s says %d offered, %s holds %d rows for it (or its rows are out of order)",
					dir, rr.Run, RunsFile, rr.Offered, RequestsFile, n)
			}
			return nil
		}
		if err := fn(&run, rows); err != nil {
			return err
		}
		if !read { // the run's rows are checked, and passed, all the same
			if err := rows(func([]event.Row) error { return nil }); err != nil {
				return err
			}
		}
	}
	if name, ok, err := reqs.peekRun(); err != nil {
		return fmt.Errorf("export %s: %s: %w", dir, RequestsFile, err)
	} else if ok {
		return fmt.Errorf("export %s: %s holds rows of run %q, which %s does not list (or lists in another order)", dir, RequestsFile, name, RunsFile)
	}
	return nil
}

// readAll reads a whole (small) table.
func readAll[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	r := parquet.NewGenericReader[T](pf)
	defer r.Close()
	out := make([]T, 0, pf.NumRows())
	buf := make([]T, 1024)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: reader made no progress", filepath.Base(path))
		}
	}
}

// timeOf maps the export's -1 back to event.Never.
func timeOf(ns int64) event.Time {
	if ns < 0 {
		return event.Never
	}
	return event.Time(ns)
}

// Names printed by the event package, mapped back to their values.
var (
	kindByName  = names(func(i int) string { return event.Kind(i).String() }, "kind(")
	causeByName = names(func(i int) string { return event.Cause(i).String() }, "cause(")
)

func names(name func(int) string, unknown string) map[string]int {
	m := map[string]int{}
	for i := 0; i < 256; i++ {
		n := name(i)
		if len(n) >= len(unknown) && n[:len(unknown)] == unknown {
			continue
		}
		if _, dup := m[n]; !dup {
			m[n] = i
		}
	}
	return m
}

// rowOf turns a requests.parquet row back into an event.Row. In a partial
// run a request may not have ended (terminal "none").
func rowOf(q *requestRow, partial bool) (event.Row, error) {
	k, ok := kindByName[q.Terminal]
	if !ok || !(event.Kind(k).Terminal() || partial && event.Kind(k) == event.KindNone) {
		return event.Row{}, fmt.Errorf("terminal %q: expected finish, refuse, expire or fail", q.Terminal)
	}
	c, ok := causeByName[q.Cause]
	if !ok {
		return event.Row{}, fmt.Errorf("unknown cause %q", q.Cause)
	}
	return event.Row{
		Req: event.RequestID(q.Req), Class: q.Class,
		Scheduled: timeOf(q.ScheduledNs), Arrival: timeOf(q.ArrivalNs), Admit: timeOf(q.AdmitNs),
		FirstToken: timeOf(q.FirstTokenNs), End: timeOf(q.EndNs),
		PrefillInst: event.Instance(q.PrefillInst), DecodeInst: event.Instance(q.DecodeInst), Crossed: q.Crossed,
		InputTokens: q.InputTokens, WantOutput: q.WantTokens, OutputTokens: q.OutputTokens, CachedTokens: q.CachedTokens,
		Terminal: event.Kind(k), Cause: event.Cause(c), Reference: q.Reference, Response: q.Response,
		Preemptions: q.Preemptions, Spilled: q.Spilled,
	}, nil
}

func roleMoveOf(m *roleMoveRow) (RoleMove, error) {
	from, err := event.ParseRole(m.From)
	if err != nil {
		return RoleMove{}, err
	}
	to, err := event.ParseRole(m.To)
	if err != nil {
		return RoleMove{}, err
	}
	c, ok := causeByName[m.Cause]
	if !ok {
		return RoleMove{}, fmt.Errorf("unknown cause %q", m.Cause)
	}
	return RoleMove{At: event.Time(m.AtNs), Inst: event.Instance(m.Inst), From: from, To: to, Cause: event.Cause(c),
		ResidentDecodeTokens: m.ResidentDecodeTokens, ResidentPrefill: event.Time(m.ResidentPrefillNs), Reason: m.Reason}, nil
}
