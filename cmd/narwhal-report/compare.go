package main

import (
	"fmt"

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
	ra, err := report.Load(a, opts)
	if err != nil {
		return usageError(fmt.Errorf("A: %w", err))
	}
	rb, err := report.Load(b, opts)
	if err != nil {
		return usageError(fmt.Errorf("B: %w", err))
	}
	cmp := report.Compare(ra, rb, a, b)
	if len(cmp.Pairs) == 0 {
		return usageError(fmt.Errorf("--compare %s %s: no run names in common", a, b))
	}
	return cmp.Write(c.Root().Writer, format)
}

// compareFlagged reads --format and the SLO overrides, then compares.
func compareFlagged(c *cli.Command) error {
	format, err := report.ParseFormat(c.String("format"))
	if err != nil {
		return usageError(fmt.Errorf("--format: %w", err))
	}
	var opts report.Options
	if err := sloFlags(c, &opts); err != nil {
		return err
	}
	return compareAction(c, format, opts)
}
