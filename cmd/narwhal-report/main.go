// Command narwhal-report scores journaled runs: per arm and rate, outcomes,
// latency percentiles, refusals by cause, goodput three ways, role moves
// and adaptation lag, answer quality, and optionally plots. See
// docs/report.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/narwhal-bench/narwhal-bench/cmd/internal/simcli"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/report"
)

const version = "0.1.0-dev"

func main() {
	// The first SIGINT or SIGTERM stops the report between runs or within
	// a run's replay (exit 130); a second one kills the process.
	ctx, stop := simcli.SignalContext()
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError marks bad usage or bad input (exit code 2).
func usageError(err error) error { return cliexit.Input(err) }

// run executes the command line and returns the exit code (internal/cliexit
// decides it from the error's type): 0 on success, 1 when writing the
// output failed, 2 on bad usage or bad input (a missing, empty or
// unreadable directory, a damaged or incomplete journal or export, a newer
// schema).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "narwhal-report: internal error: %v\n", r)
			code = 1
		}
	}()
	cmd := &cli.Command{
		Name:      "narwhal-report",
		Usage:     "score journaled narwhal-bench runs (a journal root, one run, or a Parquet export)",
		ArgsUsage: "DIR [DIR...]",
		Version:   version,
		Writer:    stdout,
		ErrWriter: stderr,
		Description: "DIR is a journal root (as sim --journal writes), one run directory, or a Parquet export\n" +
			"directory (requests.parquet, runs.parquet, ...); several DIRs (the shards of run --shard I/N)\n" +
			"make one report. The report is computed from the records alone; see docs/report.md for every column.",
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output format: text, markdown, json or csv"},
			&cli.StringFlag{Name: "ttft-slo", Usage: "judge every run by this TTFT SLO (e.g. 2.1s) instead of its metadata's"},
			&cli.StringFlag{Name: "tpot-slo", Usage: "judge every run by this TPOT SLO (e.g. 45ms) instead of its metadata's"},
			&cli.StringFlag{Name: "plots", Usage: "write the plots (PNG and SVG) to this directory"},
			compareFlag,
			&cli.StringFlag{Name: "plot-rate", Usage: "with --plots: rate (req/s) of the per-arm plots", DefaultText: "the highest rate at which the best non-oracle arm still has attainment >= 50%"},
			&cli.BoolFlag{Name: "partial", Usage: "score runs that are not whole too (interrupted, or a journal without its end-of-run record); every table and plot is labelled partial"},
		},
		Action: action,
		OnUsageError: func(_ context.Context, _ *cli.Command, err error, _ bool) error {
			return cliexit.Input(err)
		},
	}
	if err := cmd.Run(ctx, args); err != nil {
		fmt.Fprintf(stderr, "narwhal-report: %v\n", err)
		return cliexit.Code(err)
	}
	return 0
}

func action(ctx context.Context, c *cli.Command) error {
	if c.Bool("compare") {
		return compareFlagged(ctx, c)
	}
	if c.Args().Len() == 0 {
		return usageError(fmt.Errorf("expected a directory (a journal root, a run, or a Parquet export), or several (shards), got none"))
	}
	format, err := report.ParseFormat(c.String("format"))
	if err != nil {
		return usageError(fmt.Errorf("--format: %w", err))
	}
	if c.IsSet("plot-rate") && !c.IsSet("plots") {
		return usageError(errors.New("--plot-rate: only with --plots DIR"))
	}
	opts := report.Options{Partial: c.Bool("partial"), Context: ctx}
	if err := sloFlags(c, &opts); err != nil {
		return err
	}
	var plotRate float64
	if s := c.String("plot-rate"); s != "" {
		plotRate, err = strconv.ParseFloat(s, 64)
		if err != nil || !(plotRate > 0) {
			return usageError(fmt.Errorf("--plot-rate %q: expected a rate in req/s such as 3.2", s))
		}
	}
	rep, err := report.LoadAll(c.Args().Slice(), opts)
	if err != nil {
		if cliexit.Code(err) == cliexit.Interrupted {
			return err
		}
		var inc *journal.IncompleteError
		if errors.As(err, &inc) {
			err = fmt.Errorf("%w (--partial scores what is there, labelled partial)", err)
		}
		return usageError(err)
	}
	dir := c.String("plots")
	if dir != "" {
		// The rate is checked before anything is printed.
		if plotRate == 0 {
			var ok bool
			if plotRate, ok = rep.DefaultPlotRate(); !ok {
				return usageError(errors.New("--plots: no runs to plot"))
			}
		} else if plotRate, err = rep.PlotRate(plotRate); err != nil {
			return usageError(fmt.Errorf("--plot-rate: %w", err))
		}
	}
	if err := rep.Write(c.Root().Writer, format); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if dir != "" {
		files, err := rep.Plot(dir, plotRate)
		if err != nil {
			var ue *report.RateError
			if errors.As(err, &ue) {
				return usageError(err)
			}
			return err
		}
		fmt.Fprintf(c.Root().ErrWriter, "narwhal-report: %d plot files in %s (per-arm plots at %s req/s)\n", len(files), dir, strconv.FormatFloat(plotRate, 'g', 4, 64))
	}
	return nil
}

// sloFlags reads --ttft-slo and --tpot-slo into opts.
func sloFlags(c *cli.Command, opts *report.Options) error {
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{"ttft-slo", &opts.TTFTSLO}, {"tpot-slo", &opts.TPOTSLO}} {
		if s := c.String(f.name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return usageError(fmt.Errorf("--%s %q: expected a positive duration such as 2.1s or 45ms", f.name, s))
			}
			*f.dst = d
		}
	}
	return nil
}
