// Command narwhal-bench simulates and serves prefill/decode-disaggregated
// LLM fleets. See the README for its subcommands.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/sweep"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// version is stamped into run metadata.
const version = "0.1.0-dev"

func main() {
	ctx, stop := signalContext()
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the process exit code: 0 on
// success, 1 when the work failed, 2 on bad usage or bad input, 130 when
// interrupted (see exitCode).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "narwhal-bench: internal error: %v\n", r)
			code = 1
		}
	}()
	cmd := &cli.Command{
		Name:           "narwhal-bench",
		Usage:          "simulate and benchmark adaptive prefill/decode allocation for LLM serving",
		Version:        version,
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		Commands:       []*cli.Command{simCommand(stderr), runCommand(stderr), exportCommand(), stubCommand(stderr), serveCommand(stderr), liveCommand(stderr), checkCommand(), bundleCommand(stderr)},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("unknown command %q: expected sim, run, export, stub, serve, live, check or bundle (see --help)", c.Args().First())}
			}
			return cli.ShowAppHelp(c)
		},
	}
	if err := withUsageErrors(cmd).Run(ctx, args); err != nil {
		fmt.Fprintf(stderr, "narwhal-bench: %v\n", err)
		return exitCode(err)
	}
	return 0
}

// usageError marks bad input (exit code 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func simCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "replay a trace against fleet designs in the discrete-event simulator",
		Description: "Runs every arm at every rate on the same trace and fleet and prints, per arm and rate,\n" +
			"the share of offered requests that met both SLOs, and each arm's sustained rate (the\n" +
			"highest swept rate with at least 90% attainment).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Value: "demo", Usage: "built-in trace (" + strings.Join(traces.Builtin(), ", ") + "), a trace YAML file, a Mooncake .jsonl or Azure .csv file, or files joined with + to play one after another"},
			&cli.StringFlag{Name: "trace-format", Usage: "force the trace format: spec, mooncake or azure (default: by file extension)"},
			&cli.Float64Flag{Name: "speedup", Value: 1, Usage: "multiply every rate by this factor (2 plays a trace twice as fast)"},
			&cli.Float64Flag{Name: "arrival-cv", Usage: "redraw a synthetic trace's arrivals from a gamma process with this coefficient of variation of the gaps (1 = as bursty as Poisson, 2 and 4 burstier)"},
			&cli.Float64Flag{Name: "batch-mean", Usage: "send arrivals in batches at one instant, batch sizes geometric with this mean (> 1; synthetic and imported traces)"},
			&cli.StringFlag{Name: "arms", Usage: armsUsage()},
			&cli.StringFlag{Name: "rates", Usage: "mean arrival rates: req/s (2.4), multiples of the trace's base rate (1.5x), or ranges FROM..TO/STEP (0.5x..2x/0.25x); default: the trace's own rate"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for the trace's random draws, 0 or more", DefaultText: "the trace's seed"},
			&cli.StringFlag{Name: "seeds", Usage: "run the sweep once per seed and print each cell and sustained rate as mean [95% interval] (min, max under 5 seeds): a count N (the trace's seed, or --seed, and the N-1 after it), a list (1,2,3) or a range (1..5)"},
			&cli.StringFlag{Name: "fleet", Usage: "built-in fleet name (" + strings.Join(fleet.Builtin(), ", ") + ") or a fleet YAML file (default: the trace's fleet, else demo)"},
			&cli.StringFlag{Name: "ttft-slo", Usage: "override the TTFT SLO (e.g. 2.1s)"},
			&cli.StringFlag{Name: "tpot-slo", Usage: "override the TPOT SLO (e.g. 45ms)"},
			&cli.BoolFlag{Name: "prefix-cache", Usage: "turn on each engine's prefix cache (sized by the fleet's prefix_cache, default 16-token blocks, 200,000 tokens)"},
			&cli.StringFlag{Name: "admission", Usage: "admission gate: open (place every arrival at once) or queue (price each arrival's TTFT; queue it until it fits or its deadline passes); default: the fleet's, else open"},
			&cli.IntFlag{Name: "workers", Usage: "runs in parallel, 0 for one per CPU", DefaultText: "one per CPU"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (see docs/sim.md)"},
			&cli.StringFlag{Name: "journal", Usage: "write every run's records to a Pebble journal DIR/ARM@RATE (e.g. DIR/static-4P4D@1.6), then export them to Parquet in DIR/parquet; DIR must hold no runs unless --resume or --force"},
			&cli.BoolFlag{Name: "resume", Usage: "with --journal: keep the whole runs already in DIR (this sweep's, same settings) and redo partial ones"},
			&cli.BoolFlag{Name: "force", Usage: "with --journal: delete the runs and the Parquet export already in DIR first"},
			&cli.BoolFlag{Name: "no-parquet", Usage: "with --journal: skip the Parquet export"},
			replayFlag,
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if err := noArgs(c, "did you mean --trace %s?"); err != nil {
				return err
			}
			if c.String("replay") != "" {
				return replayAction(c, stderr)
			}
			cfg, err := simConfig(c)
			if err != nil {
				return err
			}
			cfg.Progress = progressBar(stderr)
			cfg.Context = ctx
			dir := c.String("journal")
			if c.IsSet("seeds") {
				if dir != "" {
					return usageError{fmt.Errorf("--seeds with --journal: journal one seed per sweep, or use an experiment file's seeds: list with narwhal-bench run")}
				}
				seeds, err := sweep.ParseSeeds(c.String("seeds"), cfg.Seed)
				if err != nil {
					return usageError{fmt.Errorf("--seeds %w", err)}
				}
				cfg.Progress = nil
				m, err := sweep.ExecuteSeeds(cfg, seeds)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					enc := json.NewEncoder(c.Root().Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(m)
				}
				return sweep.WriteMultiTable(c.Root().Writer, m)
			}
			if dir == "" {
				for _, f := range []string{"resume", "force", "no-parquet"} {
					if c.IsSet(f) {
						return usageError{fmt.Errorf("--%s: only with --journal DIR", f)}
					}
				}
			} else {
				if c.Bool("resume") {
					if err := checkResume(dir, cfg, cfg.Trace.MeanRate()); err != nil {
						return err
					}
				}
				if cfg.Journal, err = journalDir(dir, c.Bool("resume"), c.Bool("force")); err != nil {
					return err
				}
			}
			res, err := sweep.Execute(cfg)
			if err != nil {
				return err
			}
			if dir != "" && !c.Bool("no-parquet") {
				if err := exportAfter(dir, false, stderr); err != nil {
					return err
				}
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.Root().Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return sweep.WriteTable(c.Root().Writer, res)
		},
	}
}

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "export journaled runs to Parquet (requests, role_moves, decisions, faults, runs)",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "output directory", DefaultText: "DIR/parquet"},
			&cli.BoolFlag{Name: "partial", Usage: "export runs that are not whole too (interrupted, or no end-of-run record), marked in runs.parquet's partial column"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() != 1 {
				return usageError{fmt.Errorf("export: expected one journal directory, got %d arguments", c.Args().Len())}
			}
			dir := c.Args().First()
			out := c.String("out")
			if out == "" {
				out = filepath.Join(dir, "parquet")
			}
			st, err := journal.ExportWith(dir, out, journal.ExportOptions{Partial: c.Bool("partial")})
			if err != nil {
				return usageError{fmt.Errorf("%w%s", err, partialHint(err))}
			}
			partial := ""
			if st.Partial > 0 {
				partial = fmt.Sprintf(", %d of them partial", st.Partial)
			}
			fmt.Fprintf(c.Root().Writer, "exported %d runs%s (%d requests, %d role moves, %d decisions, %d faults) to %s\n",
				st.Runs, partial, st.Requests, st.RoleMoves, st.Decisions, st.Faults, out)
			return nil
		},
	}
}

func simConfig(c *cli.Command) (sweep.Config, error) {
	o := sweep.Options{Trace: c.String("trace"), TraceFormat: c.String("trace-format"), Fleet: c.String("fleet"),
		TTFT: c.String("ttft-slo"), TPOT: c.String("tpot-slo"), Rates: c.String("rates"), Speedup: c.Float64("speedup"),
		PrefixCache: c.Bool("prefix-cache"), Admission: c.String("admission"), Workers: int(c.Int("workers")), Version: version,
		ArrivalCV: c.Float64("arrival-cv"), BatchMean: c.Float64("batch-mean")}
	if c.IsSet("speedup") && !(o.Speedup > 0) {
		return sweep.Config{}, usageError{fmt.Errorf("--speedup %v: expected a factor > 0", o.Speedup)}
	}
	if c.IsSet("seed") {
		seed := c.Uint64("seed")
		o.Seed = &seed
	}
	for _, a := range strings.Split(c.String("arms"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.Arms = append(o.Arms, a)
		}
	}
	cfg, notes, err := sweep.Resolve(o)
	for _, n := range notes {
		fmt.Fprintf(c.Root().ErrWriter, "narwhal-bench: note: %s\n", n)
	}
	if err != nil {
		return cfg, flagError(err)
	}
	return cfg, nil
}

// progressBar returns a progress callback that draws on stderr when it is a
// terminal and the sweep has run for over a second; otherwise it is silent.
func progressBar(stderr io.Writer) func(done, total int) {
	f, ok := stderr.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	start := time.Now()
	var mu sync.Mutex
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(start) < time.Second {
			return
		}
		const w = 30
		fill := w * done / total
		fmt.Fprintf(f, "\r[%s%s] %d/%d steps", strings.Repeat("#", fill), strings.Repeat(".", w-fill), done, total)
		if done == total {
			fmt.Fprint(f, "\r\033[K")
		}
	}
}

// exportAfter exports a journal root a command just wrote to DIR/parquet
// (runs marked partial too, when partial) and says so on stderr.
func exportAfter(dir string, partial bool, stderr io.Writer) error {
	out := filepath.Join(dir, "parquet")
	st, err := journal.ExportWith(dir, out, journal.ExportOptions{Partial: partial})
	if err != nil {
		return fmt.Errorf("export %s: %w", dir, err)
	}
	fmt.Fprintf(stderr, "narwhal-bench: journal: %d runs, %d records in %s; Parquet in %s\n", st.Runs, st.Records, dir, out)
	return nil
}
