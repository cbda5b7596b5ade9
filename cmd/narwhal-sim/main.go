// Command narwhal-sim is `narwhal-bench sim` in a lean binary: the same
// flags, output, exit codes and results, linking only the simulator's
// packages, so that a process starts in about 3 ms instead of 7 (the
// full binary initialises the journal's, the live router's and the
// plots' dependencies before main; docs/decisions/0008-lean-sim-binary.md).
// A command line that needs a journal (--journal, --replay) is handed
// over, as it is, to narwhal-bench sim, found next to this binary or on
// PATH.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/cmd/internal/simcli"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/sweep"
)

func main() { simcli.Main(run) }

// run executes the command line and returns the process exit code, as
// narwhal-bench sim does: 0 on success, 1 when the work failed, 2 on bad
// usage or bad input, 130 when interrupted.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return simcli.Run(ctx, "narwhal-sim", args, stdout, stderr, func() *cli.Command {
		cmd := simcli.Command(stderr, handOver{args: args[1:]})
		cmd.Usage = "narwhal-bench sim in a lean binary: " + cmd.Usage
		cmd.Version = simcli.Version
		return cmd
	})
}

// fullBinary is the binary a journaled command line is handed to.
const fullBinary = "narwhal-bench"

// handOver runs a command line that needs the journal in narwhal-bench:
// it replaces this process with `narwhal-bench sim ARGS`, so the output,
// the journal and the exit code are narwhal-bench's own.
type handOver struct{ args []string }

func (h handOver) Prepare(string, sweep.Config, bool, bool) (func(string, event.RunMeta) (sweep.Sink, error), error) {
	return nil, h.exec()
}

func (h handOver) Export(string, io.Writer) error { return h.exec() }

func (h handOver) Replay(*cli.Command, io.Writer) error { return h.exec() }

// exec only returns on failure.
func (h handOver) exec() error {
	path, err := findFull()
	if err != nil {
		return err
	}
	argv := append([]string{fullBinary, "sim"}, h.args...)
	err = syscall.Exec(path, argv, os.Environ())
	return fmt.Errorf("--journal and --replay are narwhal-bench's: running %s: %w", path, err)
}

// findFull looks for narwhal-bench next to this binary (make build puts
// both in bin/), then on PATH.
func findFull() (string, error) {
	if self, err := os.Executable(); err == nil {
		if self, err := filepath.EvalSymlinks(self); err == nil {
			p := filepath.Join(filepath.Dir(self), fullBinary)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath(fullBinary); err == nil {
		return p, nil
	}
	return "", cliexit.Input(errors.New("--journal and --replay need narwhal-bench (the full binary): expected it next to narwhal-sim or on PATH (make build builds both into bin/)"))
}
