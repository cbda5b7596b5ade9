package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/sweep"
)

// replayAction is `narwhal-bench sim --replay JOURNAL`.
func replayAction(c *cli.Command, stderr io.Writer) error {
	root := c.String("replay")
	// The journal fixes the trace, its rates and seed, and the settings it
	// ran with: a flag that would change them is refused, never ignored.
	for _, f := range []string{"trace", "trace-format", "speedup", "arrival-cv", "batch-mean", "rates", "seed", "seeds",
		"prefix-cache", "admission", "refine", "resume", "force", "cordon"} {
		if c.IsSet(f) {
			return usageError{fmt.Errorf("--%s with --replay: the journal fixes it (--replay takes --fleet, --arms, --ttft-slo, --tpot-slo, --journal, --no-parquet, --json)", f)}
		}
	}
	runs, err := journal.Runs(root)
	if err != nil {
		return usageError{fmt.Errorf("--replay: %w", err)}
	}
	if len(runs) == 0 {
		return usageError{fmt.Errorf("--replay %s: no journaled runs there", root)}
	}
	var slo event.SLO
	for _, f := range []struct {
		name string
		dst  *event.Time
	}{{"ttft-slo", &slo.TTFT}, {"tpot-slo", &slo.TPOT}} {
		if s := c.String(f.name); s != "" {
			if *f.dst, err = sweep.ParseDuration(s); err != nil {
				return usageError{fmt.Errorf("--%s: %w", f.name, err)}
			}
		}
	}
	armOverride := strings.TrimSpace(c.String("arms"))
	if strings.Contains(armOverride, ",") {
		return usageError{fmt.Errorf("--arms %q with --replay: expected one arm", armOverride)}
	}
	dir := c.String("journal")
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return usageError{fmt.Errorf("--journal %s: %w", dir, err)}
		}
	}
	type cell struct {
		src *sweep.ReplaySource
		run sweep.Run
	}
	var cells []cell
	for _, rd := range runs {
		src, err := loadReplay(rd)
		if err != nil {
			return usageError{fmt.Errorf("--replay: %w", err)}
		}
		if src.Meta.PrefixCache && !src.PrefixCache() {
			fmt.Fprintf(stderr, "narwhal-bench: sim --replay: run %s: its engines kept prefix caches (live --prefix-cache), but its journal holds no prefix groups (written by a version before they were journaled): the replay computes every prompt in full\n", src.Name)
		}
		fname := c.String("fleet")
		if fname == "" {
			fname = src.Meta.Fleet
		}
		fl, err := fleet.Load(fname)
		if err != nil {
			return usageError{fmt.Errorf("--replay %s: fleet %q: %w (name the fleet file with --fleet)", src.Name, fname, err)}
		}
		arm := armOverride
		if arm == "" {
			arm = src.Meta.Arm
		}
		if err := sweep.CheckArm(arm, fl.Size()); err != nil || arm == "oracle" {
			return usageError{fmt.Errorf("--replay %s: arm %q: not a controller for %s (name one with --arms): %v", src.Name, arm, fl.Name, err)}
		}
		cfg := sweep.ReplayConfig{Fleet: fl, Arm: arm, SLO: slo, Version: version}
		if dir != "" {
			cfg.Journal = func(name string, meta event.RunMeta) (sweep.Sink, error) {
				return journal.Create(filepath.Join(dir, name), meta, journal.Options{})
			}
		}
		run, err := sweep.Replay(src, cfg)
		if err != nil {
			return err
		}
		cells = append(cells, cell{src, run})
	}
	if dir != "" && !c.Bool("no-parquet") {
		if err := exportAfter(dir, false, stderr); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		runs := make([]sweep.Run, len(cells))
		for i := range cells {
			runs[i] = cells[i].run
		}
		enc := json.NewEncoder(c.Root().Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(runs)
	}
	// One table per arm, its runs as the rate columns.
	var errs []error
	done := map[string]bool{}
	for _, x := range cells {
		arm := x.run.Arm
		if done[arm] {
			continue
		}
		done[arm] = true
		m := x.src.Meta
		res := &sweep.Result{Trace: m.Trace + " (replay of " + root + ")", Fleet: m.Fleet, Instances: m.Instances, Seed: m.Seed,
			SLO: sweep.SLOJSON{TTFT: m.TTFTSLO, TPOT: m.TPOTSLO}, BaseRate: m.Rate, Arms: []string{arm}, Cordons: m.Cordons}
		for _, y := range cells {
			if y.run.Arm == arm {
				res.Rates = append(res.Rates, y.run.Rate)
				res.Runs = append(res.Runs, y.run)
			}
		}
		res.SetSustained()
		errs = append(errs, sweep.WriteTable(c.Root().Writer, res))
	}
	return errors.Join(errs...)
}

// loadReplay reads the arrivals of the run journaled in dir.
func loadReplay(dir string) (*sweep.ReplaySource, error) {
	r, err := journal.Open(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return sweep.LoadReplay(dir, r.Meta(), r.Replay)
}
