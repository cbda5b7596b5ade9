package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/journal"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/report"
)

// compareFlag is --compare: two directories instead of one.
var compareFlag = &cli.BoolFlag{Name: "compare", Usage: "compare two sets of runs (A B: a live run and its sim --replay, say) metric by metric, paired by run name"}

// compareAction is narwhal-report --compare A B.
func compareAction(c *cli.Command, format report.Format, opts report.Options) error {
	if c.Args().Len() != 2 {
		return usageError(fmt.Errorf("--compare: expected two directories A B, got %d arguments", c.Args().Len()))
	}
	a, b := c.Args().Get(0), c.Args().Get(1)
	load := func(side, dir string) (*report.Report, error) {
		r, err := report.Load(dir, opts)
		if err != nil {
			if cliexit.Code(err) == cliexit.Interrupted {
				return nil, err
			}
			var inc *journal.IncompleteError
			if errors.As(err, &inc) {
				err = fmt.Errorf("%w (--partial compares what is there, labelled partial)", err)
			}
			return nil, usageError(fmt.Errorf("%s: %w", side, err))
		}
		return r, nil
	}
	ra, err := load("A", a)
	if err != nil {
		return err
	}
	rb, err := load("B", b)
	if err != nil {
		return err
	}
	cmp := report.Compare(ra, rb, a, b)
	if len(cmp.Pairs) == 0 {
		return usageError(fmt.Errorf("--compare %s %s: no run names in common", a, b))
	}
	return cmp.Write(c.Root().Writer, format)
}

// compareFlagged reads --format and the SLO overrides, then compares.
func compareFlagged(ctx context.Context, c *cli.Command) error {
	format, err := report.ParseFormat(c.String("format"))
	if err != nil {
		return usageError(fmt.Errorf("--format: %w", err))
	}
	if format != report.FormatText && format != report.FormatJSON {
		return usageError(fmt.Errorf("--format %s: --compare writes text or json", c.String("format")))
	}
	for _, f := range []string{"plots", "plot-rate"} {
		if c.IsSet(f) {
			return usageError(fmt.Errorf("--%s: not with --compare (plot each side's runs with its own report)", f))
		}
	}
	// --partial pairs runs that are not whole too (an interrupted live run
	// and its replay); each pair's table says so.
	opts := report.Options{Partial: c.Bool("partial"), Context: ctx}
	if err := sloFlags(c, &opts); err != nil {
		return err
	}
	return compareAction(c, format, opts)
}
