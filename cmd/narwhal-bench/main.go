// Command narwhal-bench simulates and serves prefill/decode-disaggregated
// LLM fleets. See the README for its subcommands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/cmd/internal/simcli"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/sweep"
)

// version is stamped into run metadata (the same in narwhal-sim).
const version = simcli.Version

func main() { simcli.Main(run) }

// run executes the command line and returns the process exit code: 0 on
// success, 1 when the work failed, 2 on bad usage or bad input, 130 when
// interrupted (internal/cliexit).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return simcli.Run(ctx, "narwhal-bench", args, stdout, stderr, func() *cli.Command {
		return &cli.Command{
			Usage:    "simulate and benchmark adaptive prefill/decode allocation for LLM serving",
			Version:  version,
			Commands: []*cli.Command{simcli.Command(stderr, benchJournal{}), runCommand(stderr), exportCommand(), stubCommand(stderr), serveCommand(stderr), liveCommand(stderr), checkCommand(), profileCommand(stderr), bundleCommand(stderr), cordonCommand(stderr)},
			Action: func(ctx context.Context, c *cli.Command) error {
				if c.Args().Len() > 0 {
					return usageError{fmt.Errorf("unknown command %q: expected sim, run, export, stub, serve, live, check, profile, bundle or cordon (see --help)", c.Args().First())}
				}
				return cli.ShowAppHelp(c)
			},
		}
	})
}

// usageError marks bad input (exit code 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// benchJournal serves sim's --journal and --replay with Pebble journals.
type benchJournal struct{}

func (benchJournal) Prepare(dir string, cfg sweep.Config, resume, force bool) (func(string, event.RunMeta) (sweep.Sink, error), error) {
	if resume {
		if err := checkResume(dir, cfg, cfg.Trace.MeanRate()); err != nil {
			return nil, err
		}
	}
	return journalDir(dir, resume, force)
}

func (benchJournal) Export(dir string, stderr io.Writer) error {
	return exportAfter(dir, false, stderr)
}

func (benchJournal) Replay(c *cli.Command, stderr io.Writer) error { return replayAction(c, stderr) }

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
			st, err := journal.ExportWith(dir, out, journal.ExportOptions{Partial: c.Bool("partial"), Context: ctx})
			var oe *journal.OutputError
			if errors.As(err, &oe) {
				return err // the output failed, not the input: exit 1
			}
			if err != nil {
				return usageError{fmt.Errorf("%w%s", err, partialHint(err))}
			}
			partial := ""
			if st.Partial > 0 {
				partial = fmt.Sprintf(", %d of them partial", st.Partial)
			}
			runs := "runs"
			if st.Runs == 1 {
				runs = "run"
			}
			fmt.Fprintf(c.Root().Writer, "exported %d %s%s (%d requests, %d role moves, %d decisions, %d faults) to %s\n",
				st.Runs, runs, partial, st.Requests, st.RoleMoves, st.Decisions, st.Faults, out)
			return nil
		},
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
