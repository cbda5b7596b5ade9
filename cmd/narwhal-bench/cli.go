package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/cmd/internal/simcli"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/sweep"
)

// The exit-code policy is internal/cliexit's: 0 success, 2 bad input, 1 a
// run failed, 130 interrupted, decided by the error's type.

// BadInput marks usageError as bad input for cliexit.Code.
func (usageError) BadInput() {}

// exitCode is the process exit code for err.
func exitCode(err error) int { return cliexit.Code(err) }

// The helpers the sim command shares with the others.
var (
	noArgs      = simcli.NoArgs
	flagError   = simcli.FlagError
	progressBar = simcli.ProgressBar
)

// experimentFields maps sweep.Options' option names to experiment-file
// fields.
var experimentFields = map[string]string{"ttft-slo": "slo.ttft", "tpot-slo": "slo.tpot", "trace-format": "trace_format", "cordon": "cordons"}

// experimentError turns sweep.Resolve's error for an experiment into bad
// input naming the file and the field.
func experimentError(e *sweep.Experiment, err error) error {
	file := e.Path
	if file == "" {
		file = e.Name
	}
	var oe *sweep.OptionError
	if errors.As(err, &oe) {
		field := oe.Option
		if f, ok := experimentFields[field]; ok {
			field = f
		}
		if oe.Item > 0 {
			field = fmt.Sprintf("%s[%d]", field, oe.Item-1)
		}
		return cliexit.Input(fmt.Errorf("experiment %s: field %s: %w", file, field, oe.Err))
	}
	return cliexit.Input(fmt.Errorf("experiment %s: %w", file, err))
}

// journalDir prepares --journal DIR for a sweep and returns the sweep's
// Journal function. A directory that holds runs already is refused unless
// resume (whole runs of this sweep are kept and not rerun into the
// journal, partial or damaged ones are deleted and redone; a run of
// another sweep is an error) or force (every run and the Parquet export in
// DIR are deleted first).
func journalDir(dir string, resume, force bool) (func(string, event.RunMeta) (sweep.Sink, error), error) {
	if resume && force {
		return nil, cliexit.Input(errors.New("--resume and --force: expected at most one of them"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, cliexit.Input(fmt.Errorf("--journal %s: %w", dir, err))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, cliexit.Input(fmt.Errorf("--journal %s: %w", dir, err))
	}
	var runs []string
	for _, e := range ents {
		if e.IsDir() && journal.LooksLikeRun(filepath.Join(dir, e.Name())) {
			runs = append(runs, e.Name())
		}
	}
	switch {
	case len(runs) > 0 && !resume && !force:
		return nil, cliexit.Input(fmt.Errorf("--journal %s: already holds %d runs (%s): pass --resume to finish that sweep there (whole runs are kept, partial ones redone) or --force to delete them, or choose another directory",
			dir, len(runs), examples(runs)))
	case force:
		for _, r := range runs {
			if err := os.RemoveAll(filepath.Join(dir, r)); err != nil {
				return nil, fmt.Errorf("--force: %w", err)
			}
		}
		if err := os.RemoveAll(filepath.Join(dir, "parquet")); err != nil {
			return nil, fmt.Errorf("--force: %w", err)
		}
	}
	existing := map[string]bool{}
	for _, r := range runs {
		existing[r] = true
	}
	return func(name string, meta event.RunMeta) (sweep.Sink, error) {
		path := filepath.Join(dir, name)
		if resume && existing[name] {
			ok, err := wholeRun(path, meta)
			if err != nil {
				return nil, err
			}
			if ok {
				return nil, nil // journaled whole earlier: run it again for its result, unjournaled
			}
			if err := os.RemoveAll(path); err != nil {
				return nil, err
			}
		}
		return journal.Create(path, meta, journal.Options{})
	}, nil
}

// checkResume refuses --resume into a directory holding runs this sweep
// does not make.
func checkResume(dir string, cfg sweep.Config, base float64) error {
	want := map[string]bool{}
	rates := cfg.Rates
	if len(rates) == 0 {
		rates = []float64{base}
	}
	for _, a := range cfg.Arms {
		for _, r := range rates {
			want[sweep.RunName(a, r)] = true
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // journalDir reports it
	}
	for _, e := range ents {
		if e.IsDir() && journal.LooksLikeRun(filepath.Join(dir, e.Name())) && !want[e.Name()] {
			return cliexit.Input(fmt.Errorf("--resume: --journal %s holds run %s, which this sweep does not make (another sweep's?): use the same --arms and --rates, another directory, or --force", dir, e.Name()))
		}
	}
	return nil
}

// wholeRun reports whether the run in path is whole (its end-of-run record
// present, every record checked against it) and made with the settings of
// meta; a whole run made with other settings is an error.
func wholeRun(path string, meta event.RunMeta) (bool, error) {
	r, err := journal.Open(path)
	if err != nil {
		return false, nil // partial, incomplete or damaged: redo it
	}
	defer r.Close()
	if err := r.Replay(func(*event.Record) error { return nil }); err != nil {
		return false, nil
	}
	if got := r.Meta().ConfigHash; got != meta.ConfigHash {
		return false, cliexit.Input(fmt.Errorf("--resume: run %s was made with other settings (config hash %.12s, this sweep's %.12s): use the same flags, or --force to replace it", path, got, meta.ConfigHash))
	}
	return true, nil
}

func examples(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:3], ", ") + ", ..."
}

// partialHint says how to read a run that is not whole anyway.
func partialHint(err error) string {
	var inc *journal.IncompleteError
	if errors.As(err, &inc) {
		return " (--partial exports what is there, marked partial)"
	}
	return ""
}
