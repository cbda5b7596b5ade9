package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// InputKind says what Load found in its directory.
type InputKind int

// Input kinds.
const (
	InputJournalRoot InputKind = iota // a directory of run directories (sim --journal)
	InputJournalRun                   // one run directory
	InputParquet                      // a Parquet export (journal.Export)
)

func (k InputKind) String() string {
	switch k {
	case InputJournalRoot:
		return "journal root"
	case InputJournalRun:
		return "journal run"
	case InputParquet:
		return "Parquet export"
	}
	return "input?"
}

// markerName is the journal's marker file (journal/store.go). A
// subdirectory holding one is treated as a run, so a damaged run is
// reported rather than skipped.
const markerName = "JOURNAL"

// Detect says what dir holds: one journal run, a root of runs, or a
// Parquet export, and for journals the run directories, sorted. A missing
// directory, a file, an empty directory or one holding none of these is an
// error that says so.
func Detect(dir string) (InputKind, []string, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil, fmt.Errorf("%s: no such directory", dir)
	case err != nil:
		return 0, nil, err
	case !st.IsDir():
		return 0, nil, fmt.Errorf("%s: not a directory (expected a journal root, a run directory or a Parquet export)", dir)
	}
	if journal.LooksLikeRun(dir) {
		return InputJournalRun, []string{dir}, nil
	}
	if journal.IsExport(dir) {
		return InputParquet, nil, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, err
	}
	if len(ents) == 0 {
		return 0, nil, fmt.Errorf("%s: empty directory: no journal runs and no Parquet export", dir)
	}
	var runs []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if journal.LooksLikeRun(p) {
			runs = append(runs, p)
		}
	}
	if len(runs) == 0 {
		// One combination of `narwhal-bench run`: its journals in runs/,
		// their export in parquet/. The journals are read (the export
		// then checks that none is missing).
		sub := filepath.Join(dir, "runs")
		if st, err := os.Stat(sub); err == nil && st.IsDir() && !journal.LooksLikeRun(sub) {
			if kind, rs, err := Detect(sub); err == nil && kind == InputJournalRoot {
				return kind, rs, nil
			}
		}
		return 0, nil, fmt.Errorf("%s: no journal runs (directories with a %s marker) and no Parquet export (%s and %s) among its %d entries",
			dir, markerName, journal.RunsFile, journal.RequestsFile, len(ents))
	}
	return InputJournalRoot, runs, nil
}

// Load reads dir (a journal root, one run, or a Parquet export; see
// Detect) and computes the report. Runs are read one at a time and
// their rows scored as they are read: memory holds the requests of a
// journal not yet ended (or one row group of an export) plus three
// numbers per request for the run's exact percentiles (24 bytes), and
// afterwards only the per-run numbers and the small series the plots
// draw. A run that cannot
// be read, whose schema is newer than this build's, or whose records do
// not fold cleanly (a request that never ended, as after a crash) is an
// error naming the run, unless opts.Partial. Damage (a file missing,
// truncated or altered, records lost) is always an error.
func Load(dir string, opts Options) (*Report, error) {
	return LoadAll([]string{dir}, opts)
}

// LoadAll is Load over several directories at once, as one report: the
// shards of a campaign run with `narwhal-bench run --shard I/N`, each a
// journal root or a Parquet export. A run name found in two directories
// is an error (shards never share a run).
func LoadAll(dirs []string, opts Options) (*Report, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("report: no directory")
	}
	b := newBuilder(opts)
	seen := map[string]string{}
	for _, dir := range dirs {
		before := len(b.runs)
		if err := b.addDir(dir); err != nil {
			return nil, err
		}
		for _, r := range b.runs[before:] {
			if other, dup := seen[r.Run]; dup {
				return nil, fmt.Errorf("report: run %s is in both %s and %s: expected each run in one directory", r.Run, other, dir)
			}
			seen[r.Run] = dir
		}
	}
	return b.finish(), nil
}

// interrupted is the cause once opts.Context is done, else nil.
func (b *builder) interrupted() error {
	if ctx := b.opts.Context; ctx != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// addDir adds every run of one directory.
func (b *builder) addDir(dir string) error {
	opts := b.opts
	kind, runs, err := Detect(dir)
	if err != nil {
		return err
	}
	switch kind {
	case InputParquet:
		err = journal.ReadExportEach(dir, journal.ReadExportOptions{Partial: opts.Partial}, func(run *journal.ExportedRun, rows journal.RunRows) error {
			if err := b.interrupted(); err != nil {
				return err
			}
			moves := make([]event.Record, len(run.Moves))
			for i, m := range run.Moves {
				moves[i] = event.Record{At: m.At, Kind: event.KindRoleMove, Cause: m.Cause, From: m.From, To: m.To,
					Inst: m.Inst, Peer: event.NoInstance, Tokens: m.ResidentDecodeTokens, Ref: m.ResidentPrefill}
			}
			a := b.begin(run.Name, run.Partial, run.Meta)
			if err := rows(func(chunk []event.Row) error {
				if err := b.interrupted(); err != nil {
					return err
				}
				for i := range chunk {
					b.row(a, &chunk[i])
				}
				return nil
			}); err != nil {
				return err
			}
			b.end(a, moves)
			return nil
		})
		if err != nil {
			return err
		}
	default:
		if err := checkExportedRuns(dir, kind, runs); err != nil {
			return err
		}
		var fold event.Fold
		for _, rd := range runs {
			if err := b.interrupted(); err != nil {
				return err
			}
			if err := b.addJournal(rd, &fold); err != nil {
				return err
			}
		}
	}
	return nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// checkExportedRuns refuses a journal root that lacks a run its own
// export holds: a run directory deleted, emptied or moved would otherwise
// make a smaller report. The export is DIR/parquet, as sim --journal
// writes it, or for a root named runs (or a directory holding one) beside
// a result.json the parquet beside it, as narwhal-bench run writes each
// combination.
func checkExportedRuns(dir string, kind InputKind, runs []string) error {
	if kind != InputJournalRoot || len(runs) == 0 {
		return nil
	}
	root := filepath.Dir(runs[0]) // dir, or dir/runs for a combination
	pq := filepath.Join(root, "parquet")
	if combo := filepath.Dir(root); filepath.Base(root) == "runs" && !journal.IsExport(pq) && isFile(filepath.Join(combo, "result.json")) {
		pq = filepath.Join(combo, "parquet") // run's layout: its result.json beside runs/ and parquet/
		var res struct {
			Runs []json.RawMessage `json:"runs"`
		}
		// Without its export, the result still counts the combination's runs.
		if b, err := os.ReadFile(filepath.Join(combo, "result.json")); !journal.IsExport(pq) && err == nil && json.Unmarshal(b, &res) == nil && len(res.Runs) > len(runs) {
			return fmt.Errorf("journal root %s: %s lists %d runs, %d are here as journals: a run directory was deleted, emptied or moved",
				root, filepath.Join(combo, "result.json"), len(res.Runs), len(runs))
		}
	}
	if !journal.IsExport(pq) {
		return nil
	}
	names, err := journal.ExportedRunNames(pq)
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(runs))
	for _, r := range runs {
		have[journal.RunName(r)] = true
	}
	for _, n := range names {
		if !have[n] {
			return fmt.Errorf("journal root %s: run %s is in its export (%s) but not here as a journal: a run directory was deleted, emptied or moved (export again, narwhal-bench export %s --out %s, if it was removed on purpose)", root, n, pq, root, pq)
		}
	}
	return nil
}

// addJournal replays one run directory and adds it.
func (b *builder) addJournal(dir string, fold *event.Fold) error {
	r, err := journal.OpenWith(dir, journal.OpenOptions{Partial: b.opts.Partial})
	if err != nil {
		return err
	}
	partial := r.Partial()
	defer r.Close()
	name := journal.RunName(dir)
	fold.Reset()
	a := b.begin(name, partial, r.Meta())
	// A request's row is final once it has ended: rows are scored in
	// request order as soon as every lower one has ended too, and the fold
	// lets them go, so memory holds the requests not yet ended (and those
	// after them), not the run's every row.
	var row event.Row
	next := 0
	score := func(all bool) {
		for next < fold.Len() && (all || fold.Ended(next)) {
			fold.RowAt(next, &row)
			b.row(a, &row)
			next++
		}
	}
	var moves []event.Record
	var n int64
	err = r.Replay(func(rec *event.Record) error {
		if n++; n&0xffff == 0 {
			if err := b.interrupted(); err != nil {
				return err
			}
		}
		fold.Record(rec)
		switch rec.Kind {
		case event.KindFinish, event.KindRefuse, event.KindExpire, event.KindFail:
			score(false)
			fold.Release(next)
		case event.KindRoleMove:
			m := *rec
			m.Text = "" // the reason is not reported; do not keep it
			moves = append(moves, m)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("run %s: %w", name, err)
	}
	ferr := fold.Err()
	if partial != "" {
		ferr = fold.Violation() // requests still open are expected
	}
	if ferr != nil {
		return fmt.Errorf("run %s (%s): %w", name, dir, ferr)
	}
	if end, ok := r.End(); ok && partial == "" {
		key := fmt.Sprintf("%s/%d/%d/%08x", r.Meta().Encode(), end.Records, end.LastSeq, end.CRC32C)
		if other, dup := b.whole[key]; dup && other != dir { // one directory given twice: LoadAll says so
			return fmt.Errorf("runs %s and %s hold the same journal (the same metadata and records, checksum %08x): a run directory was copied over another; remove the copy", other, dir, end.CRC32C)
		}
		b.whole[key] = dir
	}
	score(true) // every row has ended (Err checked it), or the run is partial
	b.end(a, moves)
	return nil
}

// sortRuns orders runs by arm, then rate, then name.
func sortRuns(runs []RunReport, plots []runPlot) {
	idx := make([]int, len(runs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := &runs[idx[a]], &runs[idx[b]]
		if x.Arm != y.Arm {
			return x.Arm < y.Arm
		}
		if x.Rate != y.Rate {
			return x.Rate < y.Rate
		}
		return x.Run < y.Run
	})
	r2 := make([]RunReport, len(runs))
	p2 := make([]runPlot, len(plots))
	for i, j := range idx {
		r2[i], p2[i] = runs[j], plots[j]
	}
	copy(runs, r2)
	copy(plots, p2)
}
