package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/sweep"
)

// runCommand executes experiment files: every (prefix cache, seed)
// combination is one sweep, journaled and exported under
// OUT/NAME/cache-{on,off}/seed-N/. A combination whose result.json exists is
// skipped, so an interrupted campaign resumes where it stopped.
func runCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run experiment files (journals, Parquet, results) into an output directory; resumable",
		ArgsUsage: "EXPERIMENT.yaml...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "out", Usage: "output directory"},
			&cli.IntFlag{Name: "workers", Usage: "runs in parallel, 0 for one per CPU", DefaultText: "one per CPU"},
			&cli.BoolFlag{Name: "force", Usage: "rerun combinations that already have results"},
			&cli.StringFlag{Name: "shard", Usage: "run only shard I of N (0 <= I < N): the combinations whose index over every experiment file, in order, is I modulo N; no summary is printed (run again without --shard over the merged output to print it)"},
			&cli.BoolFlag{Name: "summary-only", Usage: "run nothing: print the summary from the combinations already in --out (a merge of shards), or exit 1 listing those without a current, whole result"},
			&cli.StringFlag{Name: "seeds", Usage: "replace every experiment's seeds: a count N (the trace's seed and the N-1 after it), a list (1,2,3) or a range (1..5); the summary gives each figure as mean [95% interval] (min, max under 5 seeds)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() == 0 {
				return usageError{errors.New("run: expected at least one experiment file")}
			}
			var exps []*sweep.Experiment
			named := map[string]string{}
			for _, p := range c.Args().Slice() {
				e, err := sweep.LoadExperiment(p)
				if err != nil {
					return usageError{err}
				}
				// Outputs are OUT/NAME/...: two experiments of one name
				// would overwrite each other's results.
				if other, dup := named[e.Name]; dup {
					return usageError{fmt.Errorf("run: %s and %s are both named %q: expected one name per experiment (the output directory)", other, p, e.Name)}
				}
				named[e.Name] = p
				// Every file is checked whole before anything runs, in
				// every shard alike: a typo in the last file must not
				// surface after the first ones' compute, or in one shard.
				cfg, _, err := sweep.Resolve(sweep.Options{Trace: e.Trace, TraceFormat: e.TraceFormat, Fleet: e.Fleet, TTFT: e.SLO.TTFT,
					TPOT: e.SLO.TPOT, Arms: e.Arms, Rates: strings.Join(e.Rates, ","), Cordons: e.Cordons})
				if err != nil {
					return experimentError(e, err)
				}
				if c.IsSet("seeds") {
					seeds, err := sweep.ParseSeeds(c.String("seeds"), cfg.Seed)
					if err != nil {
						return usageError{fmt.Errorf("--seeds %w", err)}
					}
					if err := sweep.CheckSeeds(cfg.Trace, seeds); err != nil {
						return usageError{fmt.Errorf("--seeds %s: experiment %s: %w", c.String("seeds"), p, err)}
					}
					e.Seeds = seeds
				} else if err := sweep.CheckSeeds(cfg.Trace, e.Seeds); err != nil {
					return experimentError(e, &sweep.OptionError{Option: "seeds", Err: err})
				}
				exps = append(exps, e)
			}
			sh, err := parseShard(c.String("shard"))
			if err != nil {
				return usageError{err}
			}
			if sh.n > 1 && c.Bool("summary-only") {
				return usageError{errors.New("run: --summary-only and --shard: expected one of them (a shard prints no summary)")}
			}
			if c.Bool("force") && c.Bool("summary-only") {
				return usageError{errors.New("run: --summary-only and --force: expected one of them (--summary-only runs nothing)")}
			}
			// An experiment left incomplete (combinations another process
			// holds, or without results under --summary-only) does not stop
			// the next: each says what it lacks, and the exit is 1 after
			// all of them.
			var incomplete []error
			for _, e := range exps {
				err := runExperiment(ctx, c, e, stderr, &sh)
				var inc incompleteError
				switch {
				case errors.As(err, &inc):
					incomplete = append(incomplete, err)
				case err != nil:
					return err
				}
			}
			if sh.next <= sh.i {
				fmt.Fprintf(stderr, "narwhal-bench: run: shard %d/%d has no combination: the campaign has %d\n", sh.i, sh.n, sh.next)
			}
			return errors.Join(incomplete...)
		},
	}
}

// resultKey names the file that says what made a combination's result:
// the binary and the settings (comboKey).
const resultKey = "result.key"

// comboKey names a combination's result, one line each: the running
// binary (the SHA-256 of its executable, or its version where that cannot
// be read), and a hash of the settings the sweep was resolved from, the
// trace's content hash and the resolved fleet. A rerun skips a finished
// combination only when its key is the same, so a campaign rerun after
// the binary, the experiment file or its trace changed runs again rather
// than reporting the old numbers. `make build` passes -trimpath, so one
// commit builds one binary in any checkout (Go's builds are reproducible;
// without it the binary holds the checkout's path).
func comboKey(o sweep.Options, cfg sweep.Config) string {
	o.Workers = 0 // the result does not depend on it
	opts, _ := json.Marshal(o)
	fl, err := json.Marshal(cfg.Fleet)
	if err != nil {
		fl = []byte(cfg.Fleet.Name)
	}
	h := sha256.New()
	fmt.Fprintf(h, "options %s\ntrace %s\nfleet %s\n", opts, cfg.Trace.Hash(), fl)
	return fmt.Sprintf("binary %s\nsettings %s\n", binaryID(), hex.EncodeToString(h.Sum(nil)))
}

// keyDiffers says how a combination's recorded key differs from this
// run's.
func keyDiffers(made, key string) string {
	field := func(k, name string) string {
		for _, line := range strings.Split(k, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return v
			}
		}
		return ""
	}
	short := func(v string) string { return v[:min(len(v), 12)] }
	if mb, kb := field(made, "binary"), field(key, "binary"); mb != kb && field(made, "settings") == field(key, "settings") && mb != "" {
		return fmt.Sprintf("the result there was made by another build of narwhal-bench (binary %s, this one %s; `make build` builds "+
			"one commit to one binary anywhere)", short(mb), short(kb))
	}
	return "the result there was made by another binary or with other settings (the experiment file, its trace or fleet)"
}

// binaryID is the SHA-256 of the running executable, read once.
var binaryID = sync.OnceValue(func() string {
	if exe, err := os.Executable(); err == nil {
		if f, err := os.Open(exe); err == nil {
			defer f.Close()
			h := sha256.New()
			if _, err := io.Copy(h, f); err == nil {
				return hex.EncodeToString(h.Sum(nil))
			}
		}
	}
	return "version " + version
})

// combo is one sweep of an experiment.
type combo struct {
	cache bool
	seed  *uint64
}

func (k combo) dir(out, name string) string {
	cache := "off"
	if k.cache {
		cache = "on"
	}
	seed := "default"
	if k.seed != nil {
		seed = fmt.Sprint(*k.seed)
	}
	return filepath.Join(out, name, "cache-"+cache, "seed-"+seed)
}

// shard is one deterministic slice of a campaign's combinations: index I
// of N; next counts combinations seen so far over every experiment file.
type shard struct {
	i, n, next int
}

// parseShard reads I/N; empty means the whole campaign (0/1).
func parseShard(s string) (shard, error) {
	if s == "" {
		return shard{n: 1}, nil
	}
	var i, n int
	if k, err := fmt.Sscanf(s, "%d/%d", &i, &n); err != nil || k != 2 || fmt.Sprintf("%d/%d", i, n) != s || n < 1 || i < 0 || i >= n {
		return shard{}, fmt.Errorf("--shard %q: expected I/N with 0 <= I < N (0/4 is the first of four)", s)
	}
	return shard{i: i, n: n}, nil
}

// take reports whether the next combination belongs to this shard.
func (sh *shard) take() bool {
	k := sh.next
	sh.next++
	return k%sh.n == sh.i
}

func runExperiment(ctx context.Context, c *cli.Command, e *sweep.Experiment, stderr io.Writer, sh *shard) error {
	out := c.String("out") // (--seeds replaced e.Seeds when the files were checked)
	var combos []combo
	for _, cache := range e.PrefixCache {
		if len(e.Seeds) == 0 {
			combos = append(combos, combo{cache: cache})
		}
		for i := range e.Seeds {
			combos = append(combos, combo{cache: cache, seed: &e.Seeds[i]})
		}
	}
	results := make([]*sweep.Result, len(combos))
	var unfinished []string // --summary-only: what is not there to summarise
	busy := 0               // combinations another process holds
	for k, cb := range combos {
		if !sh.take() {
			continue
		}
		dir := cb.dir(out, e.Name)
		label := fmt.Sprintf("[%d/%d] %s %s", k+1, len(combos), e.Name, strings.TrimPrefix(dir, filepath.Join(out, e.Name)+string(filepath.Separator)))
		o := sweep.Options{Trace: e.Trace, TraceFormat: e.TraceFormat, Fleet: e.Fleet, TTFT: e.SLO.TTFT, TPOT: e.SLO.TPOT,
			Arms: e.Arms, Rates: strings.Join(e.Rates, ","), Seed: cb.seed, PrefixCache: cb.cache, Cordons: e.Cordons,
			Workers: int(c.Int("workers")), Version: version}
		cfg, notes, err := sweep.Resolve(o)
		if err != nil {
			return experimentError(e, err)
		}
		cr := comboRun{ctx: ctx, e: e, dir: dir, label: label, key: comboKey(o, cfg), cfg: cfg, notes: notes,
			force: c.Bool("force"), summaryOnly: c.Bool("summary-only"), stderr: stderr}
		res, why, err := cr.run()
		switch {
		case err != nil:
			return err
		case why == comboBusy:
			busy++
		case res == nil:
			unfinished = append(unfinished, fmt.Sprintf("%s: %s", dir, why))
		}
		results[k] = res
	}
	if busy > 0 {
		return incompleteError{fmt.Errorf("run: experiment %s: %d combination(s) in progress in another process (skipped): run again when it ends for the summary", e.Name, busy)}
	}
	if len(unfinished) > 0 {
		return incompleteError{fmt.Errorf("run --summary-only: experiment %s: %d of %d combinations have no current result, so no summary (run without --summary-only to run them):\n  %s",
			e.Name, len(unfinished), len(combos), strings.Join(unfinished, "\n  "))}
	}
	if sh.n > 1 {
		return nil // a shard holds part of the results: no summary
	}
	return writeSummary(c.Root().Writer, e, combos, results)
}

// incompleteError is an experiment left without its summary: combinations
// another process holds, or (--summary-only) without a current result.
type incompleteError struct{ error }

func (e incompleteError) Unwrap() error { return e.error }

// comboBusy is comboRun.run's reason for a combination another process
// holds.
const comboBusy = "in progress in another process"

// comboRun is one combination of an experiment: skipped when its result
// is there, current and whole; else run into its directory (or, with
// summaryOnly, only said to be missing).
type comboRun struct {
	ctx                context.Context
	e                  *sweep.Experiment
	dir, label, key    string
	cfg                sweep.Config
	notes              []string
	force, summaryOnly bool
	stderr             io.Writer
}

// run returns the combination's result, or nil and why there is none
// (--summary-only, or comboBusy when another process holds it).
func (cr *comboRun) run() (*sweep.Result, string, error) {
	dir, label, stderr := cr.dir, cr.label, cr.stderr
	// A combination is one process's at a time: two shards given the same
	// index (a requeued array task still running), or a merge started
	// while the shards run on a shared --out, would otherwise remove each
	// other's journals mid-run.
	unlock, held, err := lockCombo(dir, !cr.summaryOnly)
	if err != nil {
		return nil, "", err
	}
	if held {
		fmt.Fprintf(stderr, "%s: %s (%s.lock is held): skipped\n", label, comboBusy, dir)
		return nil, comboBusy, nil
	}
	defer unlock()
	resPath := filepath.Join(dir, "result.json")
	data, err := os.ReadFile(resPath)
	if err == nil && !cr.force {
		var res sweep.Result
		made, _ := os.ReadFile(filepath.Join(dir, resultKey))
		damaged, parsed := "", json.Unmarshal(data, &res) == nil
		if parsed && string(made) == cr.key {
			damaged = damagedRun(dir, &res)
			if why := damagedExport(dir, &res); damaged == "" && why != "" {
				if cr.summaryOnly {
					return nil, why, nil
				}
				// The journals are whole: only their export is redone.
				if _, err := journal.Export(filepath.Join(dir, "runs"), filepath.Join(dir, "parquet")); err != nil {
					return nil, "", fmt.Errorf("experiment %s: export again (%s): %w", cr.e.Name, why, err)
				}
				fmt.Fprintf(stderr, "%s: %s: exported its journals again\n", label, why)
			}
		}
		why := ""
		switch {
		case !parsed:
			why = "its result.json does not read"
		case string(made) != cr.key:
			// A result made by another binary, or from other settings
			// (the experiment file, its trace or fleet changed): its
			// numbers are not this one's.
			why = keyDiffers(string(made), cr.key)
		case damaged != "":
			// Its numbers stand on journals that no longer read whole:
			// the summary would rest on what the report refuses.
			why = damaged
		default:
			fmt.Fprintf(stderr, "%s: done earlier, skipped\n", label)
			return &res, "", nil
		}
		if cr.summaryOnly {
			return nil, why, nil
		}
		fmt.Fprintf(stderr, "%s: %s: running it again\n", label, why)
	} else if cr.summaryOnly { // (--force is refused with it)
		return nil, "not run (no result.json)", nil
	}
	for _, n := range cr.notes {
		fmt.Fprintf(stderr, "narwhal-bench: note: %s\n", n)
	}
	if err := os.RemoveAll(dir); err != nil { // a partial run from an interrupted campaign
		return nil, "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		return nil, "", err
	}
	cfg := cr.cfg
	cfg.Context = cr.ctx
	cfg.Progress = progressBar("narwhal-bench", stderr)
	cfg.Journal = func(name string, meta event.RunMeta) (sweep.Sink, error) {
		return journal.Create(filepath.Join(dir, "runs", name), meta, journal.Options{})
	}
	fmt.Fprintf(stderr, "%s: running %d arms x %d rates\n", label, len(cfg.Arms), max(len(cfg.Rates), 1))
	start := time.Now()
	res, err := sweep.Execute(cfg)
	if err != nil {
		return nil, "", err
	}
	if note := sweep.OverKVNote(cfg.KVCapacity(), res); note != "" {
		fmt.Fprintf(stderr, "%s: note: %s\n", label, note)
	}
	if _, err := journal.Export(filepath.Join(dir, "runs"), filepath.Join(dir, "parquet")); err != nil {
		return nil, "", fmt.Errorf("experiment %s: export: %w", cr.e.Name, err)
	}
	var table strings.Builder
	if err := sweep.WriteTable(&table, res); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.txt"), []byte(table.String()), 0o644); err != nil {
		return nil, "", err
	}
	data, err = json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, "", err
	}
	// result.json last: its presence marks the combination complete,
	// made by what result.key names.
	if err := os.WriteFile(filepath.Join(dir, resultKey), []byte(cr.key), 0o644); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(resPath, append(data, '\n'), 0o644); err != nil {
		return nil, "", err
	}
	fmt.Fprintf(stderr, "%s: done in %.1f s\n", label, time.Since(start).Seconds())
	return res, "", nil
}

// lockCombo takes the exclusive lock DIR.lock beside a combination's
// directory (creating it when create), without waiting: held reports
// that another process has it. Without create, a lock file that is not
// there means no process runs the combination.
func lockCombo(dir string, create bool) (unlock func(), held bool, err error) {
	path := dir + ".lock"
	flags := os.O_RDONLY // a shared lock needs no write access: a read-only merged --out
	if create {
		flags = os.O_RDWR
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, false, err
		}
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, os.ErrNotExist) && !create {
		return func() {}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	how := syscall.LOCK_EX
	if !create {
		// A check that runs nothing shares the lock (a shared lock needs no
		// write access, also where NFS maps flock to POSIX locks): it still
		// fails while a run holds it exclusively.
		how = syscall.LOCK_SH
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, false, nil
}

// writeSummary prints, per arm and rate, completed, SLO-qualified and
// failed shares for each prefix-cache setting side by side, over the
// experiment's seeds: one seed as the figure, several as mean [95%
// interval] (min, max under five seeds); then, with several rates, each
// arm's sustained rate over the seeds.
func writeSummary(w io.Writer, e *sweep.Experiment, combos []combo, results []*sweep.Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", e.Name)
	if e.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(e.Description))
	}
	// Group the combinations by prefix-cache setting, keeping their order.
	var caches []bool
	groups := map[bool][]*sweep.Result{}
	seeds := map[bool][]string{}
	for k, cb := range combos {
		if _, ok := groups[cb.cache]; !ok {
			caches = append(caches, cb.cache)
		}
		groups[cb.cache] = append(groups[cb.cache], results[k])
		if cb.seed != nil {
			seeds[cb.cache] = append(seeds[cb.cache], fmt.Sprint(*cb.seed))
		}
	}
	label := func(cache bool) string {
		s := "cache off"
		if cache {
			s = "cache on"
		}
		switch n := len(seeds[cache]); {
		case n == 1:
			s += ", seed " + seeds[cache][0]
		case n > 1:
			s += fmt.Sprintf(", %d seeds", n)
		}
		return s
	}
	pub := e.Published
	b.WriteString("| arm | rate (req/s) |")
	for _, cache := range caches {
		fmt.Fprintf(&b, " %s: completed | %s: SLO-qualified | %s: failed |", label(cache), label(cache), label(cache))
		if pub != nil {
			fmt.Fprintf(&b, " %s: published completed | published SLO-qualified |", label(cache))
		}
	}
	cols := 3
	if pub != nil {
		cols = 5
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", cols*len(caches)) + "\n")
	share := func(rs []*sweep.Result, ai, ri int, f func(sweep.Run) float64) string {
		var v []float64
		for _, res := range rs {
			if ai < len(res.Arms) && ri < len(res.Rates) {
				v = append(v, f(res.Runs[ai*len(res.Rates)+ri]))
			}
		}
		if len(v) == 0 {
			return "-"
		}
		st := sweep.StatOf(v)
		if st.N == 1 {
			return fmt.Sprintf("%.2f%%", st.Mean)
		}
		return fmt.Sprintf("%.2f%% [%.2f, %.2f]", st.Mean, max(st.Lo, 0), min(st.Hi, 100))
	}
	first := results[0]
	for ri, rate := range first.Rates {
		for ai, arm := range first.Arms {
			fmt.Fprintf(&b, "| %s | %.3g |", arm, rate)
			for _, cache := range caches {
				rs := groups[cache]
				if len(rs) == 1 {
					r := rs[0].Runs[ai*len(rs[0].Rates)+ri]
					fmt.Fprintf(&b, " %.2f%% (%d) | %.2f%% (%d) | %.2f%% (%d) |", pct(r.Completed, r.Offered), r.Completed,
						100*r.Attainment, r.SLOOK, pct(r.Failed, r.Offered), r.Failed)
				} else {
					fmt.Fprintf(&b, " %s | %s | %s |",
						share(rs, ai, ri, func(r sweep.Run) float64 { return pct(r.Completed, r.Offered) }),
						share(rs, ai, ri, func(r sweep.Run) float64 { return 100 * r.Attainment }),
						share(rs, ai, ri, func(r sweep.Run) float64 { return pct(r.Failed, r.Offered) }))
				}
				if pub != nil {
					for _, t := range []map[string]map[string]float64{pub.Completed, pub.Qualified} {
						if v, ok := pub.Lookup(t, arm, cache); ok {
							fmt.Fprintf(&b, " %.2f%% |", v)
						} else {
							b.WriteString(" - |")
						}
					}
				}
			}
			b.WriteString("\n")
		}
	}
	if len(first.Rates) > 1 {
		b.WriteString("\nSustained rate (req/s; highest rate such that it and every lower rate reach 90%; a seed with none counts 0):\n\n| arm |")
		for _, cache := range caches {
			fmt.Fprintf(&b, " %s |", label(cache))
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(caches)) + "\n")
		for _, arm := range first.Arms {
			fmt.Fprintf(&b, "| %s |", arm)
			for _, cache := range caches {
				var v []float64
				top := 0
				for _, res := range groups[cache] {
					x := 0.0
					if s := res.Sustained[arm]; s != nil {
						x = *s
					}
					if res.SustainedGridTop[arm] {
						top++
					}
					v = append(v, x)
				}
				st := sweep.StatOf(v)
				cell := fmt.Sprintf("%.3g", st.Mean)
				if st.N > 1 {
					cell += fmt.Sprintf(" [%.3g, %.3g]", max(st.Lo, 0), st.Hi)
				}
				if top > 0 {
					cell += fmt.Sprintf(" (grid top in %d of %d: at least that)", top, len(v))
				}
				fmt.Fprintf(&b, " %s |", cell)
			}
			b.WriteString("\n")
		}
	}
	if pub != nil && pub.Source != "" {
		fmt.Fprintf(&b, "\nPublished: %s.\n", strings.TrimSpace(pub.Source))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func comboLabel(cb combo) string {
	s := "cache off"
	if cb.cache {
		s = "cache on"
	}
	if cb.seed != nil {
		s += fmt.Sprintf(", seed %d", *cb.seed)
	}
	return s
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// damagedRun says which journal of a finished combination in dir is
// missing, not whole or damaged, and why ("" when each of res's runs
// reads whole: every record checked against its end-of-run checksum).
func damagedRun(dir string, res *sweep.Result) string {
	for _, run := range res.Runs {
		p := filepath.Join(dir, "runs", sweep.RunName(run.Arm, run.Rate))
		r, err := journal.Open(p)
		if err == nil {
			err = r.Replay(func(*event.Record) error { return nil })
			r.Close()
		}
		if err != nil {
			return fmt.Sprintf("a journal does not read whole: %v", err)
		}
	}
	return ""
}

// damagedExport says why the export of a finished combination in dir is
// not whole, or does not list exactly res's runs ("" when it is both).
func damagedExport(dir string, res *sweep.Result) string {
	pq := filepath.Join(dir, "parquet")
	if err := journal.CheckExport(pq); err != nil {
		return fmt.Sprintf("export %s: %v", pq, err)
	}
	names, err := journal.ExportedRunNames(pq)
	if err != nil {
		return err.Error()
	}
	want := map[string]bool{}
	for _, run := range res.Runs {
		want[sweep.RunName(run.Arm, run.Rate)] = true
	}
	for _, n := range names {
		if !want[n] {
			return fmt.Sprintf("export %s lists run %s, which the result does not", pq, n)
		}
		delete(want, n)
	}
	for n := range want {
		return fmt.Sprintf("export %s lacks run %s", pq, n)
	}
	return ""
}
