package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// stubCommand is `narwhal-bench stub`: one vLLM-like stub engine per
// fleet instance, in this process, until SIGINT or SIGTERM.
func stubCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "stub",
		Usage: "serve stub engines that behave as vLLM with the NIXL connector, timed by the fleet's profiles (docs/stub.md)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "fleet", Required: true, Usage: "built-in fleet name (" + strings.Join(fleet.Builtin(), ", ") + ") or a fleet YAML file"},
			&cli.IntFlag{Name: "base-port", Usage: "serve instance i on 127.0.0.1:P+i instead of its url", DefaultText: "each instance's url, else 8101+i"},
			&cli.StringFlag{Name: "model", Value: "stub", Usage: "the served model name"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the answers' text", DefaultText: "0"},
			&cli.Float64Flag{Name: "time-scale", Value: 1, Usage: "multiply every modelled duration (0.01 = 100x faster, 0 = zero cost)"},
			&cli.StringFlag{Name: "lease", Value: "30s", Usage: "how long a prefill engine pins a handoff's KV"},
			&cli.StringFlag{Name: "kv-load-failure-policy", Value: stub.PolicyFail, Usage: "a failed KV pull: fail (the request errors) or recompute"},
			&cli.IntFlag{Name: "max-model-len", Value: 32768, Usage: "prompt plus output tokens at most"},
			&cli.IntFlag{Name: "mean-output", Usage: "end answers at a natural length drawn from 1..2N tokens (0 = run to max_tokens)"},
			&cli.BoolFlag{Name: "prefix-cache", Usage: "keep a prefix cache per engine, as vLLM's automatic prefix caching (sized by the fleet's prefix_cache, default 16-token blocks, 200,000 tokens)"},
			&cli.BoolFlag{Name: "allow-faults", Usage: "serve POST /stub/faults (fault injection for tests and drills)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			spec, err := fleet.Load(c.String("fleet"))
			if err != nil {
				return usageError{fmt.Errorf("--fleet: %w", err)}
			}
			lease, err := time.ParseDuration(c.String("lease"))
			if err != nil || lease <= 0 {
				return usageError{fmt.Errorf("--lease %q: expected a positive duration such as 30s", c.String("lease"))}
			}
			ts := c.Float64("time-scale")
			opts := stub.Options{Model: c.String("model"), Seed: c.Uint64("seed"), TimeScale: &ts, Lease: lease,
				KVLoadFailurePolicy: c.String("kv-load-failure-policy"), MaxModelLen: int(c.Int("max-model-len")),
				MeanOutput: int(c.Int("mean-output")), AllowFaults: c.Bool("allow-faults"),
				Logf: func(format string, args ...any) { fmt.Fprintf(stderr, "narwhal-bench: "+format+"\n", args...) }}
			if c.Bool("prefix-cache") {
				pc := spec.PrefixCacheSize()
				opts.PrefixCache = &pc
			}
			f, err := startStubs(spec, int(c.Int("base-port")), opts, stderr)
			if err != nil {
				return err
			}
			defer f.Close()
			<-ctx.Done() // the first SIGINT or SIGTERM (simcli.SignalContext)
			fmt.Fprintln(stderr, "narwhal-bench: stub: shutting down")
			return nil
		},
	}
}

// startStubs starts one stub engine per fleet instance (at basePort+i, or
// the instances' urls when basePort is 0) and names each on stderr.
func startStubs(spec *fleet.Spec, basePort int, opts stub.Options, stderr io.Writer) (*stub.Fleet, error) {
	insts, err := stub.FromFleet(spec, basePort, &opts)
	if err != nil {
		return nil, usageError{err}
	}
	f, err := stub.NewFleet(opts, insts)
	if err != nil {
		return nil, usageError{err}
	}
	if err := f.Start(); err != nil {
		return nil, err
	}
	for _, s := range f.Servers() {
		fmt.Fprintf(stderr, "narwhal-bench: stub %s at %s\n", s.ID(), s.URL())
	}
	return f, nil
}
