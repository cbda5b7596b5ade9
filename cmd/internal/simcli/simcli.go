// Package simcli is the `sim` command, shared by narwhal-bench and the
// lean narwhal-sim binary (docs/decisions/0008-lean-sim-binary.md). It
// links the simulator's packages only: what needs the journal's storage
// (--journal, --replay) comes in through Journal, which narwhal-bench
// implements and narwhal-sim hands over to narwhal-bench.
package simcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/internal/gcfloor"
	"github.com/narwhal-bench/narwhal-bench/sweep"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// Version is stamped into run metadata by both binaries.
const Version = "0.1.0-dev"

// Main is a command's main: no collection below the GC floor
// (internal/gcfloor), the first SIGINT or SIGTERM cancels run's context,
// and what run returns is the exit code.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	gcfloor.Set(gcfloor.Default)
	ctx, stop := SignalContext()
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run runs the command line args with the root command build makes,
// writing to stdout and stderr, and returns the exit code: 0 on success,
// 1 when the work failed, 2 on bad usage or bad input, 130 when
// interrupted (internal/cliexit). An error is printed after the command's
// name; a panic is reported as an internal error (exit 1), never a crash.
func Run(ctx context.Context, name string, args []string, stdout, stderr io.Writer, build func() *cli.Command) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "%s: internal error: %v\n", name, r)
			code = cliexit.Failed
		}
	}()
	cmd := build()
	cmd.Name, cmd.Writer, cmd.ErrWriter = name, stdout, stderr
	cmd.ExitErrHandler = func(context.Context, *cli.Command, error) {}
	if err := WithUsageErrors(cmd).Run(ctx, args); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return cliexit.Code(err)
	}
	return cliexit.OK
}

// Journal is what `sim` needs from the journal: narwhal-bench's
// implementation writes and reads Pebble journals; narwhal-sim's runs the
// same command line in narwhal-bench instead.
type Journal interface {
	// Prepare readies --journal dir for the sweep cfg (resume: keep its
	// whole runs; force: delete its runs first) and returns the sweep's
	// Journal function.
	Prepare(dir string, cfg sweep.Config, resume, force bool) (func(string, event.RunMeta) (sweep.Sink, error), error)
	// Export writes the Parquet export of the journal root dir.
	Export(dir string, stderr io.Writer) error
	// Replay is `sim --replay JOURNAL`.
	Replay(c *cli.Command, stderr io.Writer) error
}

// ReplayFlag is sim's --replay.
var ReplayFlag = &cli.StringFlag{Name: "replay", Usage: "re-drive a journal's arrivals (a run, or a journal root such as live --journal writes) through the simulator: same sizes, same send times, same fleet and arm (--fleet and --arms override); then narwhal-report --compare"}

// Command is the sim command; j serves --journal and --replay.
func Command(stderr io.Writer, j Journal) *cli.Command {
	return &cli.Command{
		Name:  "sim",
		Usage: "replay a trace against fleet designs in the discrete-event simulator",
		Description: "Runs every arm at every rate on the same trace and fleet and prints, per arm and rate,\n" +
			"the share of offered requests that met both SLOs, and each arm's sustained rate (the\n" +
			"highest swept rate with at least 90% attainment).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Value: "demo", Usage: "built-in trace (" + strings.Join(traces.Builtin(), ", ") + "), fixed:IN:OUT (every prompt IN tokens, every answer OUT), a trace YAML file, a Mooncake .jsonl or Azure .csv file, or files joined with + to play one after another"},
			&cli.StringFlag{Name: "trace-format", Usage: "force the trace format: spec, mooncake or azure (default: by file extension)"},
			&cli.Float64Flag{Name: "speedup", Value: 1, Usage: "multiply every rate by this factor (2 plays a trace twice as fast)"},
			&cli.Float64Flag{Name: "arrival-cv", Usage: "redraw a synthetic trace's arrivals from a gamma process with this coefficient of variation of the gaps (1 = as bursty as Poisson, 2 and 4 burstier)"},
			&cli.Float64Flag{Name: "batch-mean", Usage: "send arrivals in batches at one instant, batch sizes geometric with this mean (> 1; synthetic and imported traces)"},
			&cli.StringFlag{Name: "arms", Usage: ArmsUsage()},
			&cli.StringFlag{Name: "rates", Usage: "mean arrival rates: req/s (2.4), multiples of the trace's base rate (1.5x), or ranges FROM..TO/STEP (0.5x..2x/0.25x); default: the trace's own rate"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for the trace's random draws, 0 or more", DefaultText: "the trace's seed"},
			&cli.StringFlag{Name: "seeds", Usage: "run the sweep once per seed and print each cell and sustained rate as mean [95% interval] (min, max under 5 seeds): a count N (the trace's seed, or --seed, and the N-1 after it), a list (1,2,3) or a range (1..5)"},
			&cli.StringFlag{Name: "fleet", Usage: "built-in fleet name (" + strings.Join(fleet.Builtin(), ", ") + ") or a fleet YAML file (default: the trace's fleet, else demo)"},
			&cli.StringFlag{Name: "ttft-slo", Usage: "override the TTFT SLO (e.g. 2.1s)"},
			&cli.StringFlag{Name: "tpot-slo", Usage: "override the TPOT SLO (e.g. 45ms)"},
			&cli.BoolFlag{Name: "prefix-cache", Usage: "turn on each engine's prefix cache (sized by the fleet's prefix_cache, default 16-token blocks, 200,000 tokens)"},
			&cli.StringFlag{Name: "admission", Usage: "admission gate: open (place every arrival at once) or queue (price each arrival's TTFT; queue it until it fits or its deadline passes); default: the fleet's, else open"},
			&cli.StringFlag{Name: "cordon", Usage: "maintenance windows, NAME@START+DURATION separated by commas (e3@60s+2m): engine NAME is cordoned from START (simulated time) for DURATION, as serve's POST /engines/NAME/cordon: no new legs there, those on it finish (docs/sim.md)"},
			&cli.IntFlag{Name: "refine", Usage: "bisect each arm's sustained rate N times (0 to 8) within the grid step above it: N more runs per arm, the rate resolved to a step over 2^N (not with --journal)"},
			&cli.IntFlag{Name: "workers", Usage: "runs in parallel, 0 for one per CPU", DefaultText: "one per CPU"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (see docs/sim.md)"},
			&cli.StringFlag{Name: "journal", Usage: "write every run's records to a Pebble journal DIR/ARM@RATE (e.g. DIR/static-4P4D@1.6), then export them to Parquet in DIR/parquet; DIR must hold no runs unless --resume or --force"},
			&cli.BoolFlag{Name: "resume", Usage: "with --journal: keep the whole runs already in DIR (this sweep's, same settings) and redo partial ones"},
			&cli.BoolFlag{Name: "force", Usage: "with --journal: delete the runs and the Parquet export already in DIR first"},
			&cli.BoolFlag{Name: "no-parquet", Usage: "with --journal: skip the Parquet export"},
			ReplayFlag,
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if err := NoArgs(c, "did you mean --trace %s?"); err != nil {
				return err
			}
			if c.String("replay") != "" {
				return j.Replay(c, stderr)
			}
			cfg, err := Config(c)
			if err != nil {
				return err
			}
			cfg.Progress = ProgressBar(c.Root().Name, stderr)
			cfg.Context = ctx
			dir := c.String("journal")
			if dir != "" && cfg.Refine > 0 {
				return cliexit.Input(errors.New("--refine with --journal: refined runs are at rates each arm's own results pick, which a journal's resume cannot check: journal the grid alone, or refine without --journal"))
			}
			if c.IsSet("seeds") {
				if dir != "" {
					return cliexit.Input(errors.New("--seeds with --journal: journal one seed per sweep, or use an experiment file's seeds: list with narwhal-bench run"))
				}
				if c.IsSet("seed") && (strings.Contains(c.String("seeds"), ",") || strings.Contains(c.String("seeds"), "..")) {
					return cliexit.Input(fmt.Errorf("--seed with --seeds %s: a list or range names its seeds: expected --seed only with a count (--seeds N)", c.String("seeds")))
				}
				seeds, err := sweep.ParseSeeds(c.String("seeds"), cfg.Seed)
				if err != nil {
					return cliexit.Input(fmt.Errorf("--seeds %w", err))
				}
				if err := sweep.CheckSeeds(cfg.Trace, seeds); err != nil {
					return cliexit.Input(fmt.Errorf("--seeds %s: %w", c.String("seeds"), err))
				}
				cfg.Progress = nil
				m, err := sweep.ExecuteSeeds(cfg, seeds)
				if err != nil {
					return err
				}
				if note := sweep.OverKVNote(cfg.KVCapacity(), m.PerSeed...); note != "" {
					fmt.Fprintf(stderr, "%s: note: %s\n", c.Root().Name, note)
				}
				if c.Bool("json") {
					return writeJSON(c.Root().Writer, m)
				}
				return sweep.WriteMultiTable(c.Root().Writer, m)
			}
			if dir == "" {
				for _, f := range []string{"resume", "force", "no-parquet"} {
					if c.IsSet(f) {
						return cliexit.Input(fmt.Errorf("--%s: only with --journal DIR", f))
					}
				}
			} else if cfg.Journal, err = j.Prepare(dir, cfg, c.Bool("resume"), c.Bool("force")); err != nil {
				return err
			}
			res, err := sweep.Execute(cfg)
			if err != nil {
				return err
			}
			if note := sweep.OverKVNote(cfg.KVCapacity(), res); note != "" {
				fmt.Fprintf(stderr, "%s: note: %s\n", c.Root().Name, note)
			}
			if dir != "" && !c.Bool("no-parquet") {
				if err := j.Export(dir, stderr); err != nil {
					return err
				}
			}
			if c.Bool("json") {
				return writeJSON(c.Root().Writer, res)
			}
			return sweep.WriteTable(c.Root().Writer, res)
		},
	}
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Config is the sweep the sim command's flags describe.
func Config(c *cli.Command) (sweep.Config, error) {
	o := sweep.Options{Trace: c.String("trace"), TraceFormat: c.String("trace-format"), Fleet: c.String("fleet"),
		TTFT: c.String("ttft-slo"), TPOT: c.String("tpot-slo"), Rates: c.String("rates"), Speedup: c.Float64("speedup"),
		PrefixCache: c.Bool("prefix-cache"), Admission: c.String("admission"), Workers: int(c.Int("workers")), Version: Version,
		Refine:    int(c.Int("refine")),
		ArrivalCV: c.Float64("arrival-cv"), BatchMean: c.Float64("batch-mean"), Cordons: c.String("cordon")}
	if c.IsSet("speedup") && !(o.Speedup > 0) {
		return sweep.Config{}, cliexit.Input(fmt.Errorf("--speedup %v: expected a factor > 0", o.Speedup))
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
		fmt.Fprintf(c.Root().ErrWriter, "%s: note: %s\n", c.Root().Name, n)
	}
	if err != nil {
		return cfg, FlagError(err)
	}
	return cfg, nil
}

// ProgressBar returns a progress callback that draws on stderr when it is
// a terminal and the sweep has run for over a second. When stderr is a
// file or a pipe (a batch job's log) it writes a line as steps end, at
// most one a minute, from the first minute on; a short sweep says nothing.
func ProgressBar(name string, stderr io.Writer) func(done, total int) {
	f, ok := stderr.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return progressLines(f, name, time.Now, time.Minute)
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

// ArmsUsage is --arms' help: one line per arm.
func ArmsUsage() string {
	var b strings.Builder
	b.WriteString("comma-separated arms (default: every static split, 32 spread evenly on a fleet over 33 engines, and aggregated):")
	for _, h := range sweep.ArmHelp {
		fmt.Fprintf(&b, "\n      %-12s %s", h.Arm, h.Help)
	}
	return b.String()
}

// NoArgs refuses positional arguments: a command must never ignore what it
// is told.
func NoArgs(c *cli.Command, hint string) error {
	if c.Args().Len() == 0 {
		return nil
	}
	// The root command's name is already the message's prefix.
	msg := fmt.Sprintf("unexpected argument %q: %s takes flags only", c.Args().First(), c.Name)
	if c.Root() != c {
		msg = c.Name + ": " + msg
	}
	if hint != "" {
		msg += "; " + fmt.Sprintf(hint, c.Args().First())
	}
	return cliexit.Input(errors.New(msg))
}

// FlagError turns sweep.Resolve's error into bad input naming the flag.
func FlagError(err error) error {
	var oe *sweep.OptionError
	if errors.As(err, &oe) {
		return cliexit.Input(fmt.Errorf("--%s: %w", oe.Option, oe.Err))
	}
	return cliexit.Input(err)
}

// SignalContext is cancelled by the first SIGINT or SIGTERM; a second one
// kills the process as usual (stop restores the default handling).
func SignalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		s, ok := <-ch
		if !ok {
			return
		}
		signal.Stop(ch)
		name := "SIGINT"
		if s == syscall.SIGTERM {
			name = "SIGTERM"
		}
		cancel(fmt.Errorf("%w by %s", cliexit.ErrInterrupted, name))
	}()
	return ctx, func() { signal.Stop(ch); close(ch); cancel(nil) }
}

// WithUsageErrors makes urfave/cli's flag-parsing errors (an unknown flag,
// a value that does not parse) bad input, on cmd and its subcommands.
func WithUsageErrors(cmd *cli.Command) *cli.Command {
	cmd.OnUsageError = func(_ context.Context, _ *cli.Command, err error, _ bool) error {
		return cliexit.Input(err)
	}
	for _, sub := range cmd.Commands {
		WithUsageErrors(sub)
	}
	return cmd
}

// progressLines is the progress callback off a terminal: a line as a step
// ends, once every period at most, none in the first period.
func progressLines(w io.Writer, name string, now func() time.Time, period time.Duration) func(done, total int) {
	start := now()
	last := start
	var mu sync.Mutex
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		t := now()
		if t.Sub(last) < period || done == total {
			return
		}
		last = t
		fmt.Fprintf(w, "%s: progress: %d of %d steps done after %v\n", name, done, total, t.Sub(start).Round(time.Second))
	}
}
