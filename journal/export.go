package journal

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Parquet rows, one struct per table. docs/parquet.md documents every column;
// keep the two in step. Times are nanoseconds since the run started, and
// -1 stands for "never" or "undefined", so every column is required (no
// nulls) and DuckDB's filters stay simple.

type requestRow struct {
	Run              string  `parquet:"run,dict"`
	Arm              string  `parquet:"arm,dict"`
	Rate             float64 `parquet:"rate,dict"`
	Req              int64   `parquet:"req,delta"`
	Class            string  `parquet:"class,dict"`
	ScheduledNs      int64   `parquet:"scheduled_ns,delta"`
	ArrivalNs        int64   `parquet:"arrival_ns,delta"`
	AdmitNs          int64   `parquet:"admit_ns,delta"`
	PrefillInst      int32   `parquet:"prefill_inst,delta"`
	DecodeInst       int32   `parquet:"decode_inst,delta"`
	Crossed          bool    `parquet:"crossed"`
	FirstTokenNs     int64   `parquet:"first_token_ns,delta"`
	EndNs            int64   `parquet:"end_ns,delta"`
	TTFTNs           int64   `parquet:"ttft_ns,delta"`
	TPOTNs           int64   `parquet:"tpot_ns,delta"`
	E2ENs            int64   `parquet:"e2e_ns,delta"`
	InputTokens      int64   `parquet:"input_tokens,delta"`
	WantTokens       int64   `parquet:"want_tokens,delta"`
	OutputTokens     int64   `parquet:"output_tokens,delta"`
	CachedTokens     int64   `parquet:"cached_tokens,delta"`
	Terminal         string  `parquet:"terminal,dict"`
	Cause            string  `parquet:"cause,dict"`
	SLOOK            bool    `parquet:"slo_ok"`
	FirstFailedCheck string  `parquet:"first_failed_check,dict"`
	Reference        string  `parquet:"reference"`         // the trace's reference answer; "" when none
	Response         string  `parquet:"response"`          // the response text (live runs); "" when none
	Preemptions      int64   `parquet:"preemptions,delta"` // times its decode stream was preempted for KV capacity
	Spilled          bool    `parquet:"spilled"`           // its prompt ran on a decode engine (burst spill)
}

type roleMoveRow struct {
	Run                  string  `parquet:"run,dict"`
	Arm                  string  `parquet:"arm,dict"`
	Rate                 float64 `parquet:"rate,dict"`
	AtNs                 int64   `parquet:"at_ns,delta"`
	Inst                 int32   `parquet:"inst,delta"`
	From                 string  `parquet:"from,dict"`
	To                   string  `parquet:"to,dict"`
	Cause                string  `parquet:"cause,dict"`
	ResidentDecodeTokens int64   `parquet:"resident_decode_tokens,delta"`
	ResidentPrefillNs    int64   `parquet:"resident_prefill_ns,delta"`
	Reason               string  `parquet:"reason"`
}

type decisionRow struct {
	Run  string  `parquet:"run,dict"`
	Arm  string  `parquet:"arm,dict"`
	Rate float64 `parquet:"rate,dict"`
	AtNs int64   `parquet:"at_ns,delta"`
	Text string  `parquet:"text"`
}

type faultRow struct {
	Run    string  `parquet:"run,dict"`
	Arm    string  `parquet:"arm,dict"`
	Rate   float64 `parquet:"rate,dict"`
	AtNs   int64   `parquet:"at_ns,delta"`
	Kind   string  `parquet:"kind,dict"`
	Inst   int32   `parquet:"inst,delta"`
	Req    int64   `parquet:"req,delta"`
	Cause  string  `parquet:"cause,dict"`
	Tokens int64   `parquet:"tokens,delta"`
	// State is a health change's new state, down or up ("" for a
	// failure): the cause alone does not say it for an operator's cordon
	// and uncordon.
	State string `parquet:"state,dict"`
}

type runRow struct {
	Run           string  `parquet:"run"`
	Arm           string  `parquet:"arm"`
	Rate          float64 `parquet:"rate,dict"`
	Seed          uint64  `parquet:"seed,delta"`
	Trace         string  `parquet:"trace"`
	TraceHash     string  `parquet:"trace_hash"`
	Fleet         string  `parquet:"fleet"`
	ConfigHash    string  `parquet:"config_hash"`
	Version       string  `parquet:"version"`
	Driver        string  `parquet:"driver"`
	Instances     int64   `parquet:"instances,delta"`
	GPUs          int64   `parquet:"gpus,delta"`
	TTFTSLOs      float64 `parquet:"ttft_slo_s"`
	TPOTSLOs      float64 `parquet:"tpot_slo_s"`
	StartUnixNano int64   `parquet:"start_unix_nano,delta"`
	Records       int64   `parquet:"records,delta"`
	Offered       int64   `parquet:"offered,delta"`
	Partial       string  `parquet:"partial"` // why the run is partial; "" for a whole run
	// The live load generator's fields (event.RunMeta; zero in
	// simulations), so an export says what a journal says about how the
	// load was delivered: the endpoint (--target) or the journal a replay
	// re-drove, whether the load stopped before the whole trace was sent,
	// the requests planned and sent, and the schedule lag.
	Target      string  `parquet:"target"`
	Replay      string  `parquet:"replay"`
	Interrupted bool    `parquet:"interrupted"`
	Planned     int64   `parquet:"planned,delta"`
	Sent        int64   `parquet:"sent,delta"`
	LagP50s     float64 `parquet:"lag_p50_s"`
	LagP90s     float64 `parquet:"lag_p90_s"`
	LagP99s     float64 `parquet:"lag_p99_s"`
	Degraded    bool    `parquet:"degraded"`
	PrefixCache bool    `parquet:"prefix_cache"`
	Cordons     string  `parquet:"cordons"`
}

// Table file names, in the order Export writes them.
const (
	RequestsFile  = "requests.parquet"
	RoleMovesFile = "role_moves.parquet"
	DecisionsFile = "decisions.parquet"
	FaultsFile    = "faults.parquet"
	RunsFile      = "runs.parquet"
	// ManifestFile lists the tables with their sizes and SHA-256 sums;
	// Export writes it last, ReadExport checks every table against it.
	ManifestFile = "manifest.json"
)

// TableFiles are the five tables, in the order Export writes them.
var TableFiles = []string{RequestsFile, RoleMovesFile, DecisionsFile, FaultsFile, RunsFile}

// ExportStats counts what Export wrote.
type ExportStats struct {
	Runs      int
	Records   int64 // journal records read, run metadata included
	Requests  int64 // rows of requests.parquet
	RoleMoves int64
	Decisions int64
	Faults    int64
	Partial   int      // runs exported as partial (ExportOptions.Partial)
	Files     []string // the files written, in table order, then the manifest
}

// ExportOptions tune Export.
type ExportOptions struct {
	// Partial exports runs that are not whole (no end-of-run record, or
	// marked partial): their requests that had not ended get terminal
	// "none", and runs.parquet's partial column says why. Without it such
	// a run fails the export.
	Partial bool
	// Context, when set, interrupts the export when done: it stops
	// between runs and within a run's replay, leaves any previous export
	// in place, and returns an error wrapping context.Cause.
	Context context.Context
}

// interrupted is the context's cause once ctx is done, else nil.
func interrupted(ctx context.Context) error {
	if ctx != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// rowGroupRows caps a row group; a run's rows start a new row group, so
// small runs give one row group each.
const rowGroupRows = 1 << 17

// chunkRows is how many rows are converted before each parquet Write.
const chunkRows = 8192

// zstdCodec is the compression of every column. SpeedFastest keeps the
// 1M-request export well under its time budget; the files are small anyway
// because most columns are dictionary or delta-friendly integers.
var zstdCodec = &zstd.Codec{Level: zstd.SpeedFastest}

// OutputError is an export's failure to write its output (the directory,
// a Parquet file, the manifest), as against a journal it cannot read.
type OutputError struct{ Err error }

func (e *OutputError) Error() string { return "writing the export: " + e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

// table is one Parquet file being written: a temporary file renamed into
// place once everything succeeded.
type table[T any] struct {
	final, tmp string
	f          *os.File
	sum        hash.Hash // SHA-256 of what was written
	size       int64
	bw         *bufio.Writer
	w          *parquet.GenericWriter[T]
	buf        []T
	rows       int64
}

func newTable[T any](dir, name string) (*table[T], error) {
	t := &table[T]{final: filepath.Join(dir, name), tmp: filepath.Join(dir, "."+name+".tmp")}
	f, err := os.Create(t.tmp)
	if err != nil {
		return nil, err
	}
	t.f = f
	t.sum = sha256.New()
	t.bw = bufio.NewWriterSize(io.MultiWriter(f, t.sum), 1<<20)
	t.w = parquet.NewGenericWriter[T](t.bw,
		parquet.Compression(zstdCodec),
		// A fixed creator string: the file must not depend on the build.
		parquet.CreatedBy("narwhal-bench", "journal-export-1", "-"),
		parquet.MaxRowsPerRowGroup(rowGroupRows),
	)
	t.buf = make([]T, 0, chunkRows)
	return t, nil
}

// add buffers one row, writing a chunk when the buffer is full.
func (t *table[T]) add(row T) error {
	t.buf = append(t.buf, row)
	if len(t.buf) == cap(t.buf) {
		return t.drain()
	}
	return nil
}

func (t *table[T]) drain() error {
	if len(t.buf) == 0 {
		return nil
	}
	n, err := t.w.Write(t.buf)
	t.rows += int64(n)
	clear(t.buf) // drop string references
	t.buf = t.buf[:0]
	if err != nil {
		return &OutputError{Err: fmt.Errorf("%s: %w", filepath.Base(t.final), err)}
	}
	return nil
}

// endRun writes buffered rows and closes the current row group.
func (t *table[T]) endRun() error {
	if err := t.drain(); err != nil {
		return err
	}
	if err := t.w.Flush(); err != nil {
		return &OutputError{Err: fmt.Errorf("%s: %w", filepath.Base(t.final), err)}
	}
	return nil
}

// complete writes the rest of the file, the footer included, and syncs it
// under its temporary name.
func (t *table[T]) complete() error {
	err := t.drain()
	if err == nil {
		err = t.w.Close()
	}
	if err == nil {
		err = t.bw.Flush()
	}
	if err == nil {
		err = t.f.Sync()
	}
	if err == nil {
		var st os.FileInfo
		if st, err = t.f.Stat(); err == nil {
			t.size = st.Size()
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(t.final), err)
	}
	return nil
}

func (t *table[T]) entry() manifestEntry {
	return manifestEntry{Name: filepath.Base(t.final), Bytes: t.size, SHA256: hex.EncodeToString(t.sum.Sum(nil))}
}

// publish closes the completed file and renames it into place.
func (t *table[T]) publish() error {
	err := t.f.Close()
	t.f = nil
	if err == nil {
		err = os.Rename(t.tmp, t.final)
	}
	if err != nil {
		_ = os.Remove(t.tmp)
		return fmt.Errorf("%s: %w", filepath.Base(t.final), err)
	}
	return nil
}

// abandon removes the temporary file after a failure.
func (t *table[T]) abandon() {
	if t.f != nil {
		_ = t.f.Close()
		t.f = nil
		_ = os.Remove(t.tmp)
	}
}

type exporter struct {
	requests  *table[requestRow]
	roleMoves *table[roleMoveRow]
	decisions *table[decisionRow]
	faults    *table[faultRow]
	runs      *table[runRow]
	fold      event.Fold // reused across runs
	stats     ExportStats
	opts      ExportOptions
}

// Export exports the whole runs under root; it is ExportWith with no
// options.
func Export(root, outDir string) (ExportStats, error) {
	return ExportWith(root, outDir, ExportOptions{})
}

// ExportWith reads every run under root (see Runs) and writes the five
// tables requests, role_moves, decisions, faults and runs as
// zstd-compressed Parquet files in outDir, replacing files of the same
// names, and then manifest.json, which lists each table's size and SHA-256
// sum. docs/parquet.md describes the columns. Runs are exported in sorted
// order, one at a time; a run's request rows go out in RequestID order as
// they end and are then let go (Fold.Release), so memory holds the rows
// of the requests open at once, and the output is byte-identical for the
// same journals. A run that is not
// whole (see Open; allowed with o.Partial), that is damaged, or whose
// records do not fold cleanly fails the export with an error naming the
// run; no table is replaced then.
func ExportWith(root, outDir string, o ExportOptions) (ExportStats, error) {
	runs, err := Runs(root)
	if err != nil {
		return ExportStats{}, fmt.Errorf("export: %w", err)
	}
	if len(runs) == 0 {
		return ExportStats{}, fmt.Errorf("export: %s: no journals here or in its subdirectories", root)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return ExportStats{}, fmt.Errorf("export: %w", &OutputError{Err: err})
	}
	e := &exporter{opts: o}
	if err := e.open(outDir); err != nil {
		e.abandon()
		return ExportStats{}, fmt.Errorf("export: %w", &OutputError{Err: err})
	}
	for _, dir := range runs {
		if err := interrupted(o.Context); err != nil {
			e.abandon()
			return ExportStats{}, fmt.Errorf("export: %w", err)
		}
		if err := e.run(dir); err != nil {
			e.abandon()
			return ExportStats{}, fmt.Errorf("export: %w", err)
		}
	}
	if err := e.finish(); err != nil {
		e.abandon()
		return ExportStats{}, fmt.Errorf("export: %w", &OutputError{Err: err})
	}
	e.stats.Runs = len(runs)
	return e.stats, nil
}

func (e *exporter) open(dir string) (err error) {
	if e.requests, err = newTable[requestRow](dir, RequestsFile); err != nil {
		return err
	}
	if e.roleMoves, err = newTable[roleMoveRow](dir, RoleMovesFile); err != nil {
		return err
	}
	if e.decisions, err = newTable[decisionRow](dir, DecisionsFile); err != nil {
		return err
	}
	if e.faults, err = newTable[faultRow](dir, FaultsFile); err != nil {
		return err
	}
	e.runs, err = newTable[runRow](dir, RunsFile)
	return err
}

func (e *exporter) abandon() {
	if e.requests != nil {
		e.requests.abandon()
	}
	if e.roleMoves != nil {
		e.roleMoves.abandon()
	}
	if e.decisions != nil {
		e.decisions.abandon()
	}
	if e.faults != nil {
		e.faults.abandon()
	}
	if e.runs != nil {
		e.runs.abandon()
	}
}

func (e *exporter) finish() error {
	// Every file is complete and synced before the first is renamed, so a
	// failure while writing leaves the previous export (if any) whole.
	for _, c := range []func() error{e.requests.complete, e.roleMoves.complete, e.decisions.complete, e.faults.complete, e.runs.complete} {
		if err := c(); err != nil {
			return err
		}
	}
	dir := filepath.Dir(e.requests.final)
	m := manifest{Format: manifestFormat, Runs: e.runs.rows, Files: []manifestEntry{e.requests.entry(), e.roleMoves.entry(),
		e.decisions.entry(), e.faults.entry(), e.runs.entry()}}
	// The manifest goes first and comes back last: a failure while the
	// tables are renamed leaves no manifest, which readers refuse.
	if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, p := range []func() error{e.requests.publish, e.roleMoves.publish, e.decisions.publish, e.faults.publish, e.runs.publish} {
		if err := p(); err != nil {
			return err
		}
	}
	if err := writeManifest(dir, m); err != nil {
		return err
	}
	e.stats.Requests = e.requests.rows
	e.stats.RoleMoves = e.roleMoves.rows
	e.stats.Decisions = e.decisions.rows
	e.stats.Faults = e.faults.rows
	e.stats.Files = []string{e.requests.final, e.roleMoves.final, e.decisions.final, e.faults.final, e.runs.final, filepath.Join(dir, ManifestFile)}
	return nil
}

// nsOrNone maps Never to -1.
func nsOrNone(t event.Time) int64 {
	if t == event.Never {
		return -1
	}
	return int64(t)
}

// run exports one run directory.
func (e *exporter) run(dir string) (err error) {
	r, err := OpenWith(dir, OpenOptions{Partial: e.opts.Partial})
	if err != nil {
		return err
	}
	partial := r.Partial()
	defer func() {
		if cerr := r.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	m := r.Meta()
	name := RunName(dir)
	e.fold.Reset()
	slo := sloOf(m)
	// The requests table is written by its own goroutine while the journal
	// replays: a request's row is final once it has ended, so rows go out
	// in RequestID order as soon as every lower one has ended too.
	batches := make(chan []event.Row, 8)
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for b := range batches {
			for k := range b {
				if werr == nil {
					werr = e.requests.add(requestRowOf(name, m, slo, &b[k]))
				}
			}
		}
	}()
	batch := make([]event.Row, 0, 1024)
	next := 0 // the lowest row not yet sent
	send := func(all bool) {
		for next < e.fold.Len() && (all || e.fold.Ended(next)) {
			var row event.Row
			e.fold.RowAt(next, &row)
			batch = append(batch, row)
			next++
			if len(batch) == cap(batch) {
				batches <- batch
				batch = make([]event.Row, 0, 1024)
			}
		}
	}
	var records int64
	err = r.Replay(func(rec *event.Record) error {
		if records++; records&0xffff == 0 {
			if err := interrupted(e.opts.Context); err != nil {
				return err
			}
		}
		e.fold.Record(rec)
		switch rec.Kind {
		case event.KindFinish, event.KindRefuse, event.KindExpire, event.KindFail:
			send(false)
			// Rows sent are copied out: the fold lets them go, so memory
			// holds the rows not yet ended (and those after them), not the
			// run's every row.
			e.fold.Release(next)
		}
		switch rec.Kind {
		case event.KindRoleMove:
			return e.roleMoves.add(roleMoveRow{Run: name, Arm: m.Arm, Rate: m.Rate, AtNs: int64(rec.At),
				Inst: int32(rec.Inst), From: rec.From.String(), To: rec.To.String(), Cause: rec.Cause.String(),
				ResidentDecodeTokens: rec.Tokens, ResidentPrefillNs: int64(rec.Ref), Reason: rec.Text})
		case event.KindDecision:
			return e.decisions.add(decisionRow{Run: name, Arm: m.Arm, Rate: m.Rate, AtNs: int64(rec.At), Text: rec.Text})
		case event.KindFail, event.KindHealth:
			return e.faults.add(faultRow{Run: name, Arm: m.Arm, Rate: m.Rate, AtNs: int64(rec.At), Kind: rec.Kind.String(),
				Inst: int32(rec.Inst), Req: int64(rec.Req), Cause: rec.Cause.String(), Tokens: rec.Tokens, State: healthState(rec)})
		}
		return nil
	})
	if err == nil {
		err = foldErr(r, &e.fold)
	}
	if err == nil {
		send(true) // every row has ended (Err checked it), or the run is partial
	}
	if len(batch) > 0 {
		batches <- batch
	}
	close(batches)
	<-written
	if err != nil {
		return fmt.Errorf("run %s (%s): %w", name, dir, err)
	}
	if werr != nil {
		return fmt.Errorf("run %s: %w", name, werr)
	}
	if err := e.runs.add(runRow{Run: name, Arm: m.Arm, Rate: m.Rate, Seed: m.Seed, Trace: m.Trace, TraceHash: m.TraceHash,
		Fleet: m.Fleet, ConfigHash: m.ConfigHash, Version: m.Version, Driver: m.Driver,
		Instances: int64(m.Instances), GPUs: int64(m.GPUs), TTFTSLOs: m.TTFTSLO, TPOTSLOs: m.TPOTSLO,
		StartUnixNano: m.StartUnixNano, Records: records, Offered: int64(e.fold.Len()), Partial: partial,
		Target: m.Target, Replay: m.Replay, Interrupted: m.Partial, Planned: int64(m.Planned), Sent: int64(m.Sent),
		LagP50s: m.LagP50, LagP90s: m.LagP90, LagP99s: m.LagP99, Degraded: m.Degraded,
		PrefixCache: m.PrefixCache, Cordons: m.Cordons}); err != nil {
		return fmt.Errorf("run %s: %w", name, err)
	}
	for _, end := range []func() error{e.requests.endRun, e.roleMoves.endRun, e.decisions.endRun, e.faults.endRun} {
		if err := end(); err != nil {
			return fmt.Errorf("run %s: %w", name, err)
		}
	}
	e.stats.Records += records
	if partial != "" {
		e.stats.Partial++
	}
	return nil
}

// sloOf returns the SLO a run is judged by, from its metadata.
func sloOf(m event.RunMeta) event.SLO {
	return event.SLO{TTFT: event.Seconds(m.TTFTSLO), TPOT: event.Seconds(m.TPOTSLO)}
}

// requestRowOf flattens one folded request.
func requestRowOf(name string, m event.RunMeta, slo event.SLO, r *event.Row) requestRow {
	check := event.Qualify(r, slo)
	e2e := int64(-1)
	if r.Terminal == event.KindFinish && r.End != event.Never && r.Scheduled != event.Never {
		e2e = int64(r.End - r.Scheduled)
	}
	return requestRow{
		Run: name, Arm: m.Arm, Rate: m.Rate, Req: int64(r.Req), Class: r.Class,
		ScheduledNs: nsOrNone(r.Scheduled), ArrivalNs: nsOrNone(r.Arrival), AdmitNs: nsOrNone(r.Admit),
		PrefillInst: int32(r.PrefillInst), DecodeInst: int32(r.DecodeInst), Crossed: r.Crossed,
		FirstTokenNs: nsOrNone(r.FirstToken), EndNs: nsOrNone(r.End),
		TTFTNs: nsOrNone(r.TTFT()), TPOTNs: nsOrNone(r.TPOT()), E2ENs: e2e,
		InputTokens: r.InputTokens, WantTokens: r.WantOutput, OutputTokens: r.OutputTokens, CachedTokens: r.CachedTokens,
		Terminal: r.Terminal.String(), Cause: r.Cause.String(),
		SLOOK: check == event.CheckOK, FirstFailedCheck: check.String(),
		Reference: r.Reference, Response: r.Response, Preemptions: r.Preemptions, Spilled: r.Spilled,
	}
}

// healthState is a health record's new state ("down" or "up"); "" for any
// other record.
func healthState(rec *event.Record) string {
	if rec.Kind != event.KindHealth {
		return ""
	}
	return rec.Text
}
