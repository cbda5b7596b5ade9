package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/live"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/live/loadgen"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
	"github.com/narwhal-bench/narwhal-bench/report"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/sweep"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// liveCommand is `narwhal-bench live`: a trace replayed open loop against
// the live router on a fleet (or stub engines), or against any
// OpenAI-compatible endpoint, scored like a simulation.
func liveCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "live",
		Usage: "replay a trace open loop against the live router on a fleet (--fleet, --stub) or any OpenAI endpoint (--target), scored like sim (docs/live.md)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "fleet", Usage: "built-in fleet name (" + strings.Join(fleet.Builtin(), ", ") + ") or a fleet YAML file: the router runs in this process in front of its engines"},
			&cli.StringFlag{Name: "target", Usage: "drive this OpenAI-compatible base URL instead (a bare vLLM, Dynamo, Ray Serve LLM, a remote serve); journaled on the client side"},
			&cli.StringFlag{Name: "trace", Value: "demo", Usage: "built-in trace (" + strings.Join(traces.Builtin(), ", ") + "), fixed:IN:OUT (every prompt IN tokens, every answer OUT: vllm bench serve's random dataset), a trace YAML file, a Mooncake .jsonl or Azure .csv file"},
			&cli.StringFlag{Name: "trace-format", Usage: "force the trace format: spec, mooncake or azure"},
			&cli.Float64Flag{Name: "arrival-cv", Usage: "as sim's: redraw a synthetic trace's arrivals from a gamma process with this coefficient of variation of the gaps (1 = Poisson; vllm bench serve's --burstiness B is CV 1/sqrt(B))"},
			&cli.Float64Flag{Name: "batch-mean", Usage: "as sim's: send arrivals in batches at one instant, batch sizes geometric with this mean (> 1)"},
			&cli.StringFlag{Name: "rate", Usage: "one mean arrival rate: req/s (2.4) or a multiple of the trace's rate (1.5x)"},
			&cli.StringFlag{Name: "rates", Usage: "several rates, as sim's --rates; one live run per rate, one after another"},
			&cli.StringFlag{Name: "arm", Usage: "controller with --fleet (static:kPmD, static:kPmD/alg1, aggregated, hybrid:kPmM, adaptive, arrow, planner, coldswap, dynamo, ray; default adaptive); with --target, the label of the system driven (default target)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the trace's draws and the prompts", DefaultText: "the trace's seed"},
			&cli.StringFlag{Name: "journal", Usage: "write each run's journal to DIR/ARM@RATE, the client's own timings to DIR/client/ARM@RATE.csv, and the Parquet export to DIR/parquet"},
			&cli.BoolFlag{Name: "no-parquet", Usage: "with --journal: skip the Parquet export"},
			&cli.BoolFlag{Name: "stub", Usage: "with --fleet: first start stub engines for the fleet in this process (loopback, free ports): a whole live run without a GPU"},
			&cli.StringFlag{Name: "cordon", Usage: "with --fleet: maintenance windows, NAME@START+DURATION separated by commas (e3@20s+30s): the router in this process cordons engine NAME at START after the load generator starts, for DURATION, as sim --cordon plays them (sim --replay replays them)"},
			&cli.BoolFlag{Name: "prefix-cache", Usage: "with --fleet: the engines keep prefix caches (vLLM's automatic prefix caching; with --stub, the stubs', sized by the fleet's prefix_cache) and the router's placement prices them, as sim --prefix-cache"},
			&cli.Float64Flag{Name: "stub-time-scale", Value: 1, Usage: "with --stub: multiply the stubs' modelled durations (0 = zero cost; anything but 1 makes times disagree with sim)"},
			&cli.IntFlag{Name: "base-port", Usage: "with --fleet: engines at 127.0.0.1:P+i instead of the fleet file's urls", DefaultText: "the urls"},
			&cli.StringFlag{Name: "listen", Usage: "with --fleet: the address the in-process router serves on, to watch its /state and /metrics (or scrape them) during the run; said on stderr", DefaultText: "a free loopback port"},
			&cli.StringFlag{Name: "model", Usage: "the model field of every request (default: stub with --stub, else the first model GET /v1/models lists)"},
			&cli.StringFlag{Name: "endpoint", Value: loadgen.EndpointCompletions, Usage: "completions (/v1/completions) or chat (/v1/chat/completions)"},
			&cli.StringFlag{Name: "api-key", Usage: "bearer token for --target (default: $NARWHAL_API_KEY)"},
			&cli.IntFlag{Name: "max-concurrency", Usage: "at most this many requests in flight; the wait for a slot is the client's own queue (client_queue_s), not lag", DefaultText: "no bound, pure open loop"},
			&cli.StringFlag{Name: "request-timeout", Value: "1h", Usage: "bound on one request end to end"},
			&cli.StringFlag{Name: "first-token-timeout", Usage: "bound on the wait for a request's first token (default: the request timeout)"},
			&cli.StringFlag{Name: "drain-timeout", Value: "10s", Usage: "after Ctrl-C, how long requests in flight may finish before they are cancelled"},
			&cli.StringFlag{Name: "duration", Usage: "play only the trace's first D of (scaled) time, e.g. 20s"},
			&cli.IntFlag{Name: "limit", Usage: "send only the first N requests", DefaultText: "all"},
			&cli.IntFlag{Name: "warmup", Usage: "with --target: first send the plan's first N requests at once, with other prompts, unscored and unjournaled (an engine's first requests pay one-time costs); none succeeding stops the run (exit 1)", DefaultText: "none"},
			&cli.StringFlag{Name: "ttft-slo", Usage: "override the TTFT SLO (e.g. 2.1s)"},
			&cli.StringFlag{Name: "tpot-slo", Usage: "override the TPOT SLO (e.g. 45ms)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		}, append(engineFlags(), routerClientFlags("--target")...)...),
		Action: func(ctx context.Context, c *cli.Command) error {
			lc, err := liveConfig(c, stderr)
			if err != nil {
				return usageError{err}
			}
			// ctx is the first SIGINT or SIGTERM's (simcli.SignalContext):
			// a second one kills the process, as the docs say.
			return lc.run(ctx, c.Root().Writer, stderr)
		},
	}
}

// liveRun is a resolved `live` command line.
type liveRun struct {
	trace       *traces.Trace
	spec        *fleet.Spec // nil with --target
	target      string
	arm         string
	rates       []float64
	seed        uint64
	slo         event.SLO
	dir         string
	noParquet   bool
	stub        bool
	prefixCache bool // --prefix-cache: stub caches, prefix-aware placement
	// cordons are --cordon's windows (trace time) and their canonical
	// spelling (run metadata).
	cordons    []sim.Cordon
	cordonSpec string
	timeScale  float64
	basePort   int
	listen     string // --listen: the in-process router's address
	model      string
	lg         loadgen.Config
	duration   time.Duration
	limit      int
	json       bool
	progressTo io.Writer
	// sloFrom names a default the SLOs came from (--target with a trace
	// that names none): said on stderr, since goodput depends on them.
	sloFrom string
	warmup  int // --warmup: requests sent first, unscored (--target)
	// engines carries the in-process router's engine legs, as serve's
	// engine flags ask (nil: the router's default).
	engines http.RoundTripper
	// targetTLS reaches an https:// --target with --cacert, --cert and
	// --key (nil: Go's defaults).
	targetTLS *tls.Config
}

// targetTransport carries one run's requests to the target: a transport of
// its own per run (as loadgen's default, so that no run reuses another's
// connections), with --cacert, --cert and --key; nil (loadgen's default)
// without them.
func (lc *liveRun) targetTransport() http.RoundTripper {
	if lc.targetTLS == nil {
		return nil
	}
	tr := loadgen.NewTransport()
	tr.TLSClientConfig = lc.targetTLS.Clone()
	return tr
}

func liveConfig(c *cli.Command, stderr io.Writer) (*liveRun, error) {
	if c.Args().Len() > 0 {
		return nil, fmt.Errorf("live: unexpected argument %q: every input is a flag", c.Args().First())
	}
	lc := &liveRun{target: c.String("target"), dir: c.String("journal"), noParquet: c.Bool("no-parquet"),
		stub: c.Bool("stub"), timeScale: c.Float64("stub-time-scale"), basePort: int(c.Int("base-port")),
		listen: c.String("listen"), model: c.String("model"), limit: int(c.Int("limit")), json: c.Bool("json"), warmup: int(c.Int("warmup")),
		prefixCache: c.Bool("prefix-cache")}
	switch {
	case lc.target == "" && c.String("fleet") == "":
		return nil, errors.New("live: expected --fleet FILE (the router in this process) or --target URL (any OpenAI endpoint)")
	case lc.target != "" && c.String("fleet") != "":
		return nil, errors.New("live: --fleet and --target: expected one of them")
	case lc.target != "" && lc.stub:
		return nil, errors.New("--stub: needs --fleet (it starts the fleet's engines as stubs)")
	case lc.target != "" && lc.prefixCache:
		return nil, errors.New("--prefix-cache: needs --fleet (whether a target's engines cache prefixes is the target's setting)")
	case lc.target != "" && lc.listen != "":
		return nil, errors.New("--listen: needs --fleet (it is the address of the router this process runs)")
	case lc.target != "" && c.IsSet("base-port"):
		return nil, errors.New("--base-port: needs --fleet (it places the fleet's engines; a --target's are its own)")
	case lc.target != "" && c.IsSet("stub-time-scale"):
		return nil, errors.New("--stub-time-scale: needs --fleet and --stub (it times the stub engines this process starts)")
	case lc.target != "" && engineFlagGiven(c) != "":
		return nil, fmt.Errorf("%s: needs --fleet (the router this process runs reaches the fleet's engines with it; a --target reaches its own engines)", engineFlagGiven(c))
	case lc.stub && engineFlagGiven(c) != "":
		return nil, fmt.Errorf("%s: not with --stub (the stub engines this process starts serve plain http:// on loopback and ask for no key)", engineFlagGiven(c))
	}
	var err error
	if lc.targetTLS, err = routerClientTLS(c, "target", stderr); err != nil {
		return nil, err
	}
	if lc.listen != "" {
		// Said before any engine starts; each run listens on it in turn.
		ln, err := net.Listen("tcp", lc.listen)
		if err != nil {
			return nil, fmt.Errorf("--listen %q: %w", lc.listen, err)
		}
		_ = ln.Close()
	}
	tr, err := traces.Open(c.String("trace"), c.String("trace-format"))
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if tr, err = sweep.WithBurst(tr, c.Float64("arrival-cv"), c.Float64("batch-mean")); err != nil {
		var oe *sweep.OptionError
		if errors.As(err, &oe) {
			return nil, fmt.Errorf("--%s: %w", oe.Option, oe.Err)
		}
		return nil, err
	}
	lc.trace, lc.seed = tr, tr.Seed
	if c.IsSet("seed") {
		lc.seed = c.Uint64("seed")
	}
	if lc.target != "" && c.String("cordon") != "" {
		return nil, fmt.Errorf("--cordon with --target: the target's engines are not this process's to cordon (cordon them on the target's own router)")
	}
	if lc.target != "" {
		if !strings.HasPrefix(lc.target, "http://") && !strings.HasPrefix(lc.target, "https://") {
			return nil, fmt.Errorf("--target %q: expected http://HOST:PORT or https://...", lc.target)
		}
		lc.arm = c.String("arm")
		if lc.arm == "" {
			lc.arm = "target"
		}
		if strings.ContainsAny(lc.arm, "/@ ") {
			return nil, fmt.Errorf("--arm %q: a label without '/', '@' or spaces", lc.arm)
		}
		name := tr.Fleet
		if name == "" {
			name = "demo"
		}
		if f, err := fleet.Load(name); err == nil {
			lc.slo = f.CoreSLO()
			lc.sloFrom = "fleet " + name + "'s SLO"
		}
	} else {
		if lc.spec, err = fleet.Load(c.String("fleet")); err != nil {
			return nil, fmt.Errorf("--fleet: %w", err)
		}
		lc.slo = lc.spec.CoreSLO()
		if err := basePortErr(lc.basePort, lc.spec.Size()); err != nil {
			return nil, err
		}
		if lc.engines, err = engineTransport(c, nil); err != nil {
			return nil, err
		}
		noteEngineTLSUnused(c, engineURLs(lc.spec, lc.basePort), stderr)
		lc.arm = c.String("arm")
		if lc.arm == "" {
			lc.arm = "adaptive"
		}
		if lc.arm == "oracle" || lc.arm == "phase-oracle" {
			return nil, fmt.Errorf("--arm %s: the hindsight arms (oracle, phase-oracle) choose their schedule from the whole run and run only in sim", lc.arm)
		}
		if _, err := core.NewController(lc.arm, lc.spec.Size()); err != nil {
			return nil, fmt.Errorf("--arm: %w", err)
		}
		if spec := c.String("cordon"); spec != "" {
			if lc.cordons, lc.cordonSpec, err = sweep.ParseCordons(spec, lc.spec.Names()); err != nil {
				return nil, fmt.Errorf("--cordon: %w", err)
			}
		}
	}
	if tr.SLO.TTFT > 0 || tr.SLO.TPOT > 0 {
		lc.sloFrom = ""
	}
	if tr.SLO.TTFT > 0 {
		lc.slo.TTFT = event.Time(tr.SLO.TTFT)
	}
	if tr.SLO.TPOT > 0 {
		lc.slo.TPOT = event.Time(tr.SLO.TPOT)
	}
	if c.String("ttft-slo") != "" && c.String("tpot-slo") != "" {
		lc.sloFrom = ""
	}
	sources := map[string]string{}
	for _, f := range []struct {
		name string
		dst  *event.Time
	}{{"ttft-slo", &lc.slo.TTFT}, {"tpot-slo", &lc.slo.TPOT}} {
		sources[f.name] = lc.sloFrom
		if s := c.String(f.name); s != "" {
			d, err := sweep.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", f.name, err)
			}
			*f.dst = d
			sources[f.name] = "--" + f.name
		}
	}
	if lc.sloFrom != "" {
		// Each bound with where it came from: a flag given for one of
		// them is not the fleet's.
		lc.sloFrom = fmt.Sprintf("TTFT <= %v (%s), TPOT <= %v (%s)", time.Duration(lc.slo.TTFT), sources["ttft-slo"], time.Duration(lc.slo.TPOT), sources["tpot-slo"])
	}
	if c.String("rate") != "" && c.String("rates") != "" {
		return nil, errors.New("--rate and --rates: expected one of them")
	}
	flag, rs := "rates", c.String("rates")
	if rs == "" {
		flag, rs = "rate", c.String("rate")
	}
	if rs == "" {
		lc.rates = []float64{tr.MeanRate()}
	} else if lc.rates, err = sweep.ParseRates(rs, tr.MeanRate()); err != nil {
		if strings.Contains(strings.ToLower(rs), "inf") {
			// vllm bench serve's --request-rate inf sends every request
			// at once; here a run's rate is what the report charts.
			return nil, fmt.Errorf("--%s %q: expected a finite rate; for vllm bench serve's --request-rate inf (every request at once, held back by --max-concurrency), give a rate far above the fleet's with a request count (vllm's --num-prompts), such as --rate 10000 --max-concurrency 64 --limit 1000: the rate scales the trace, so without --limit it plans as many requests as the trace holds at that rate", flag, rs)
		}
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	key := c.String("api-key")
	if key == "" {
		key = os.Getenv("NARWHAL_API_KEY")
	}
	lc.lg = loadgen.Config{Endpoint: c.String("endpoint"), APIKey: key, Seed: lc.seed,
		MaxConcurrency: int(c.Int("max-concurrency")), KeepTokenTimes: true}
	if lc.lg.Endpoint != loadgen.EndpointChat && lc.lg.Endpoint != loadgen.EndpointCompletions {
		return nil, fmt.Errorf("--endpoint %q: expected completions or chat", lc.lg.Endpoint)
	}
	for _, d := range []struct {
		flag string
		dst  *time.Duration
	}{{"request-timeout", &lc.lg.RequestTimeout}, {"first-token-timeout", &lc.lg.FirstTokenTimeout},
		{"drain-timeout", &lc.lg.Drain}, {"duration", &lc.duration}} {
		if s := c.String(d.flag); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("--%s %q: expected a positive duration such as 30s", d.flag, s)
			}
			*d.dst = v
		}
	}
	if lc.warmup < 0 || lc.warmup > 0 && lc.target == "" {
		return nil, fmt.Errorf("--warmup %d: expected a count >= 0, with --target (the stub fleet has no first-request costs)", lc.warmup)
	}
	if lc.limit < 0 {
		return nil, fmt.Errorf("--limit %d: expected a request count >= 0 (0: every request of the trace)", lc.limit)
	}
	if n := c.Int("max-concurrency"); n < 0 {
		return nil, fmt.Errorf("--max-concurrency %d: expected >= 0 (0: no bound)", n)
	}
	return lc, nil
}

// plan is the trace at one rate as the load generator's requests, and the
// trace's requests themselves.
func (lc *liveRun) plan(rate float64) ([]loadgen.Item, error) {
	reqs, err := lc.trace.Generate(lc.seed, rate/lc.trace.MeanRate())
	if err != nil {
		return nil, fmt.Errorf("trace %s at %v req/s: %w", lc.trace.Name, rate, err)
	}
	var plan []loadgen.Item
	for _, q := range reqs {
		if lc.duration > 0 && time.Duration(q.At) >= lc.duration {
			break
		}
		if lc.limit > 0 && len(plan) >= lc.limit {
			break
		}
		plan = append(plan, planItem(q))
	}
	if len(plan) == 0 {
		// Scored, an empty run would read as 0% attained (or 0/0): no
		// verdict can rest on it.
		why := fmt.Sprintf("the trace %s holds no request", lc.trace.Name)
		if lc.duration > 0 {
			why += fmt.Sprintf(" within --duration %s", lc.duration)
		}
		return nil, fmt.Errorf("--rate(s) %s: %s at this rate: raise the rate or the duration", fmtRate(rate), why)
	}
	return plan, nil
}

// warmUp sends the first rate's first n requests at once to the target,
// with prompts of their own (another salt), and waits for them: they are
// neither scored nor journaled. None succeeding is an error. what names
// them ("warm-up", or "test request": the one request a --target run
// sends first without --warmup, as vllm bench serve does, so that a target
// that does not serve fails at once rather than after the whole trace).
func (lc *liveRun) warmUp(ctx context.Context, stderr io.Writer, n int, what string) error {
	plan, err := lc.plan(lc.rates[0])
	if err != nil {
		return usageError{err}
	}
	plan = plan[:min(n, len(plan))]
	for i := range plan {
		plan[i].At = 0
	}
	cfg := lc.lg
	cfg.URL, cfg.Salt, cfg.Transport = lc.target, 0x7761726d7570, lc.targetTransport() // salt: "warmup"
	cfg.IDPrefix = "nwb-warmup-"
	if cfg.Model = lc.model; cfg.Model == "" {
		if cfg.Model, err = firstModel(ctx, lc.target, cfg.APIKey, cfg.Transport); err != nil {
			// The target not answering is a failed run (exit 1), not bad
			// input: the URL was well formed.
			return fmt.Errorf("--target %s: %w (or name the model with --model)", lc.target, err)
		}
	}
	res, err := loadgen.Run(ctx, cfg, plan)
	if err != nil {
		return err
	}
	s := loadgen.Summarize(res, 0, 0)
	if s.Sent == 1 {
		verdict := "failed"
		if s.OK == 1 {
			verdict = "ok"
		}
		fmt.Fprintf(stderr, "narwhal-bench: live: %s to %s: %s\n", what, lc.target, verdict)
	} else {
		fmt.Fprintf(stderr, "narwhal-bench: live: %s: %d requests to %s, %d succeeded\n", what, s.Sent, lc.target, s.OK)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("live: stopped during the %s: %w", what, cliexit.ErrInterrupted)
	}
	if s.OK == 0 {
		return fmt.Errorf("live: %s: no request succeeded (%s): the target does not serve; nothing was sent at the trace's rates", what, strings.Join(s.ErrorKinds, "; "))
	}
	return nil
}

// planItem asks for exactly the trace's answer length (min_tokens =
// max_tokens), or, when the trace caps the answer below it, for the cap
// with min_tokens one lower, so the answer stops at the cap with reason
// length and is journaled as cut, as the simulator scores it. Its prompt
// begins with its prefix group's shared text (loadgen.SharedPromptText), or
// with the text of the earlier turn that left that group cached.
func planItem(q traces.Request) loadgen.Item {
	it := loadgen.Item{At: time.Duration(q.At), Class: q.Class, Input: q.InputTokens, Output: q.OutputTokens, MinTokens: q.OutputTokens,
		PrefixGroup: q.PrefixGroup, PrefixTokens: q.PrefixTokens, CacheGroup: q.CacheGroup, CacheTokens: q.CacheTokens}
	if q.OutputCap > 0 && q.OutputTokens > q.OutputCap {
		it.Output, it.MinTokens = q.OutputCap, q.OutputCap-1
	}
	return it
}

// liveResult is one rate's run.
type liveResult struct {
	Run     string          `json:"run"`
	Rate    float64         `json:"rate"`
	Meta    event.RunMeta   `json:"meta"`
	Score   sweep.Run       `json:"score"`
	Client  loadgen.Summary `json:"client"`
	Journal string          `json:"journal,omitempty"`
}

func (lc *liveRun) run(ctx context.Context, stdout, stderr io.Writer) error {
	for _, rate := range lc.rates {
		// Every rate's plan is checked before the first runs: a sweep
		// is not cut short by a rate with nothing to send.
		plan, err := lc.plan(rate)
		if err != nil {
			return usageError{err}
		}
		if lc.limit > len(plan) {
			// vllm bench serve's --num-prompts and AIPerf's request count
			// send that many; here the trace at the rate holds fewer.
			within := ""
			if lc.duration > 0 {
				within = " within --duration"
			}
			fmt.Fprintf(stderr, "narwhal-bench: live: --limit %d: the trace holds %d requests at %s req/s%s: all %d are sent (a longer trace, or a higher rate, holds more)\n",
				lc.limit, len(plan), fmtRate(rate), within, len(plan))
		}
	}
	if lc.sloFrom != "" {
		fmt.Fprintf(stderr, "narwhal-bench: live: goodput is scored against %s: the trace names no SLOs; set --ttft-slo and --tpot-slo for your own\n", lc.sloFrom)
	}
	if lc.dir != "" {
		if err := os.MkdirAll(lc.dir, 0o755); err != nil {
			return usageError{fmt.Errorf("--journal %s: %w", lc.dir, err)}
		}
		for _, rate := range lc.rates {
			p := filepath.Join(lc.dir, sweep.RunName(lc.arm, rate))
			if _, err := os.Stat(p); err == nil {
				return usageError{fmt.Errorf("--journal %s: run %s already exists: choose another directory", lc.dir, filepath.Base(p))}
			}
		}
	}
	switch {
	case lc.warmup > 0:
		if err := lc.warmUp(ctx, stderr, lc.warmup, "warm-up"); err != nil {
			return err
		}
	case lc.target != "":
		if err := lc.warmUp(ctx, stderr, 1, "test request"); err != nil {
			return err
		}
	case !lc.stub:
		// The fleet's own engines: each must answer before the trace
		// is played, or the run would measure a smaller fleet (or none).
		if bad := lc.engineHealth(ctx); bad != "" {
			return fmt.Errorf("live: the fleet's engines must answer before the run%s; nothing was sent", bad)
		}
	}
	var results []liveResult
	stopped := false
	for _, rate := range lc.rates {
		if ctx.Err() != nil {
			stopped = true
			break
		}
		res, err := lc.one(ctx, rate, stderr)
		if err != nil {
			return err
		}
		results = append(results, *res)
		if res.Meta.Partial {
			stopped = true
			break
		}
	}
	if lc.dir != "" && !lc.noParquet && len(results) > 0 {
		_ = os.RemoveAll(filepath.Join(lc.dir, "parquet"))
		// A run cut short by Ctrl-C is exported too, marked partial in
		// runs.parquet (its journal's end-of-run record says so).
		if err := exportAfter(lc.dir, stopped, stderr); err != nil {
			return err
		}
	}
	if lc.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	} else if err := lc.writeTable(stdout, results, lc.incomplete(results, stopped)); err != nil {
		return err
	}
	if stopped {
		return fmt.Errorf("live: %s: %w", lc.incomplete(results, stopped), cliexit.ErrInterrupted)
	}
	for _, x := range results {
		if c := x.Client; c.Sent > 0 && c.OK == 0 {
			return fmt.Errorf("live: at %s req/s no request succeeded (%d errors: %s): the run measured nothing%s", fmtRate(x.Rate), c.Errors, strings.Join(c.ErrorKinds, "; "), lc.engineHealth(ctx))
		}
	}
	return nil
}

// engineHealth probes the fleet's engines' /health as the in-process
// router reaches them (its transport: the engine flags' TLS and key), after
// a run in which no request succeeded: a failure there names the cause (a
// TLS handshake refused, a certificate not trusted, a connection refused)
// that the clients' 502s do not. "" for --target and --stub runs, and when
// every engine answers.
func (lc *liveRun) engineHealth(ctx context.Context) string {
	if lc.target != "" || lc.stub || lc.spec == nil {
		return ""
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: lc.engines}
	names, urls := lc.spec.Names(), engineURLs(lc.spec, lc.basePort)
	var bad []string
	for i, u := range urls {
		if err := getOK(ctx, client, u+"/health", nil); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", names[i], err))
		}
	}
	switch {
	case len(bad) == 0:
		return ""
	case len(bad) > 3:
		bad = append(bad[:3], fmt.Sprintf("and %d more", len(bad)-3))
	}
	return "; the engines' /health as the router reaches them: " + strings.Join(bad, "; ")
}

// one runs the trace at one rate.
func (lc *liveRun) one(ctx context.Context, rate float64, stderr io.Writer) (*liveResult, error) {
	plan, err := lc.plan(rate)
	if err != nil {
		return nil, usageError{err}
	}
	name := sweep.RunName(lc.arm, rate)
	meta := event.RunMeta{Schema: event.SchemaVersion, Version: version, Driver: "live", Arm: lc.arm, Rate: rate,
		Seed: lc.seed, Trace: lc.trace.Name, TraceHash: lc.trace.Hash(), TTFTSLO: lc.slo.TTFT.Seconds(),
		TPOTSLO: lc.slo.TPOT.Seconds(), Planned: len(plan), Target: lc.target, PrefixCache: lc.prefixCache}
	if lc.spec != nil {
		meta.Fleet, meta.Instances, meta.GPUs = lc.spec.Name, lc.spec.Size(), lc.spec.Size()*lc.spec.GPUsPerInstance
	} else {
		meta.Fleet, meta.Instances = "target", 1
	}
	meta.Cordons = lc.cordonSpec
	meta.ConfigHash = liveConfigHash(lc, meta)
	cfg := lc.lg
	// Each rate's prompts differ from the other rates' (the same seed
	// gives the same prompts at one rate): a target's prefix cache must
	// not serve a later rate from an earlier one's prompts.
	cfg.Salt = math.Float64bits(rate)
	cfg.Progress = progressBar("narwhal-bench", stderr)
	var (
		res   *loadgen.Result
		fold  event.Fold
		moves sweep.MoveLog
		tmp   *journal.Writer
	)
	tmpDir := ""
	if lc.target != "" {
		cfg.URL, cfg.Transport = lc.target, lc.targetTransport()
		if cfg.Model = lc.model; cfg.Model == "" {
			if cfg.Model, err = firstModel(ctx, lc.target, cfg.APIKey, cfg.Transport); err != nil {
				return nil, fmt.Errorf("--target %s: %w (or name the model with --model)", lc.target, err)
			}
		}
		meta.StartUnixNano = time.Now().UnixNano()
		fmt.Fprintf(stderr, "narwhal-bench: live: %d requests at %s req/s to %s (model %s)\n", len(plan), fmtRate(rate), lc.target, cfg.Model)
		if res, err = loadgen.Run(ctx, cfg, plan); err != nil {
			return nil, err
		}
		for _, r := range loadgen.Records(res) {
			fold.Record(&r)
		}
	} else {
		fl, err := lc.startFleet(stderr)
		if err != nil {
			return nil, err
		}
		defer fl.close()
		var rec event.Recorder = event.Tee{&fold, &moves}
		if lc.dir != "" {
			tmpDir = filepath.Join(lc.dir, name+".partial")
			_ = os.RemoveAll(tmpDir)
			m := meta
			m.Partial = true // until the run ends and its journal is copied
			if tmp, err = journal.Create(tmpDir, m, journal.Options{}); err != nil {
				return nil, usageError{fmt.Errorf("--journal: %w", err)}
			}
			rec = event.Tee{&fold, &moves, tmp}
		}
		ctrl, err := core.NewController(lc.arm, lc.spec.Size())
		if err != nil {
			return nil, usageError{err}
		}
		sweep.AttachLiveRehearser(ctrl, sweep.SimConfig(lc.spec, lc.spec.CoreSLO(), lc.prefixCache))
		rcfg := live.Config{Fleet: lc.spec, URLs: fl.urls, Controller: ctrl, Recorder: rec, Transport: lc.engines}
		if lc.prefixCache {
			pc := lc.spec.PrefixCacheSize()
			rcfg.PrefixCache = &pc
		}
		rt, err := live.New(rcfg)
		if err != nil {
			return nil, usageError{err}
		}
		meta.StartUnixNano = rt.Start().UnixNano()
		addr := lc.listen
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, usageError{fmt.Errorf("--listen %q: %w", addr, err)}
		}
		rctx, rcancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() { runErr <- rt.Run(rctx) }()
		srv := &http.Server{Handler: rt.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: api.ServerIdleTimeout}
		go func() { _ = srv.Serve(ln) }()
		flushCtx, stopFlush := context.WithCancel(context.Background())
		if tmp != nil {
			go flushEvery(flushCtx, tmp, time.Second)
		}
		cfg.URL, cfg.RouterStart = "http://"+ln.Addr().String(), rt.Start()
		if cfg.Model = lc.model; cfg.Model == "" {
			cfg.Model = "stub"
		}
		fmt.Fprintf(stderr, "narwhal-bench: live: %d requests at %s req/s through the router at %s (%s, %s, %d engines)\n",
			len(plan), fmtRate(rate), cfg.URL, lc.arm, lc.spec.Name, lc.spec.Size())
		stopCordons := playCordons(rt, lc.spec.Names(), lc.cordons, stderr)
		res, err = loadgen.Run(ctx, cfg, plan)
		stopCordons()
		stopFlush()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
		rcancel()
		rerr := <-runErr
		if err == nil {
			err = rerr
		}
		if tmp != nil {
			err = errors.Join(err, tmp.Close())
		}
		if err != nil {
			return nil, err
		}
	}
	sum := loadgen.Summarize(res, time.Duration(lc.slo.TTFT), time.Duration(lc.slo.TPOT))
	meta.Partial, meta.Sent = res.Partial, len(res.Outcomes)
	meta.LagP50, meta.LagP90, meta.LagP99, meta.Degraded = sum.Lag.P50, sum.Lag.P90, sum.Lag.P99, sum.Degraded
	if err := fold.Err(); err != nil {
		return nil, fmt.Errorf("live %s: journal inconsistent: %w", name, err)
	}
	rows := fold.Rows()
	s := report.Summarize(rows, lc.slo)
	scored := sweep.Scored(lc.arm, rate, s, moves.Moves(), nil)
	scored.Moves, scored.SimSeconds = moves.Count(), res.Elapsed.Seconds()
	out := &liveResult{Run: name, Rate: rate, Meta: meta, Client: sum, Score: scored}
	if lc.dir == "" {
		return out, nil
	}
	final := filepath.Join(lc.dir, name)
	w, err := journal.Create(final, meta, journal.Options{})
	if err != nil {
		return nil, err
	}
	if tmpDir != "" {
		err = copyRecords(tmpDir, w)
	} else {
		for _, r := range loadgen.Records(res) {
			w.Record(&r)
		}
	}
	closeJournal := w.Close
	if res.Partial {
		// Interrupted: the journal's end-of-run record says so, and every
		// reader refuses it unless asked to score a partial run.
		why := "interrupted: stopped before the whole trace was sent"
		if len(res.Outcomes) == res.Planned {
			why = "interrupted: stopped with requests in flight, cancelled after the drain"
		}
		closeJournal = func() error { return w.ClosePartial(why) }
	}
	if err = errors.Join(err, closeJournal()); err != nil {
		return nil, fmt.Errorf("journal %s: %w", final, err)
	}
	if tmpDir != "" {
		if err := os.RemoveAll(tmpDir); err != nil {
			return nil, err
		}
	}
	out.Journal = final
	if err := writeClientCSV(filepath.Join(lc.dir, "client", name+".csv"), res); err != nil {
		return nil, err
	}
	return out, nil
}

// copyRecords replays the journal in src (but its metadata) into w.
func copyRecords(src string, w *journal.Writer) error {
	r, err := journal.Open(src)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Replay(func(rec *event.Record) error {
		if rec.Kind != event.KindRunMeta {
			w.Record(rec)
		}
		return w.Err()
	})
}

// stubFleet is what one live run started: stub engines (with --stub) and
// the engines' URLs.
type stubFleet struct {
	urls  []string
	stubs *stub.Fleet
}

func (f *stubFleet) close() {
	if f.stubs != nil {
		f.stubs.Close()
	}
}

func (lc *liveRun) startFleet(stderr io.Writer) (*stubFleet, error) {
	out := &stubFleet{}
	n := lc.spec.Size()
	if lc.basePort > 0 {
		out.urls = make([]string, n)
		for i := range out.urls {
			out.urls[i] = fmt.Sprintf("http://127.0.0.1:%d", lc.basePort+i)
		}
	}
	if !lc.stub {
		return out, nil
	}
	ts := lc.timeScale
	opts := stub.Options{Model: lc.model, TimeScale: &ts, Seed: lc.seed}
	if lc.prefixCache {
		pc := lc.spec.PrefixCacheSize()
		opts.PrefixCache = &pc
	}
	if opts.Model == "" {
		opts.Model = "stub"
	}
	var sf *stub.Fleet
	var err error
	if lc.basePort == 0 {
		// Free ports: several runs may share a machine.
		if sf, err = stub.StartLoopback(lc.spec, opts); err != nil {
			return nil, usageError{err}
		}
	} else if sf, err = startStubs(lc.spec, lc.basePort, opts, io.Discard); err != nil {
		// A port taken is the flag's to fix, as --listen's (exit 2).
		return nil, usageError{fmt.Errorf("--base-port %d: %w", lc.basePort, err)}
	}
	out.stubs = sf
	out.urls = make([]string, n)
	for i, s := range sf.Servers() {
		out.urls[i] = s.URL()
	}
	return out, nil
}

// firstModel asks an endpoint which model it serves, through rt (nil:
// Go's default transport).
func firstModel(ctx context.Context, base, key string, rt http.RoundTripper) (string, error) {
	base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hq, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	if key != "" {
		hq.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Transport: rt}).Do(hq)
	if err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	defer resp.Body.Close()
	var v struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/models: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil || len(v.Data) == 0 || v.Data[0].ID == "" {
		return "", errors.New("GET /v1/models lists no model")
	}
	return v.Data[0].ID, nil
}

// writeClientCSV writes the client's own timings of every sent request:
// times in ns from the load generator's time 0, and last
// journal_scheduled_ns, the request's scheduled send as its journal holds
// it (the router's clock with --fleet), to join the two on.
func writeClientCSV(path string, res *loadgen.Result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"index", "class", "input_tokens", "max_tokens", "scheduled_ns", "sent_ns", "first_token_ns",
		"end_ns", "output_tokens", "chunks", "status", "finish_reason", "error", "chunk_us_after_send", "journal_scheduled_ns", "client_queue_ns", "server_prompt_tokens"})
	for i := range res.Outcomes {
		o := &res.Outcomes[i]
		tok := make([]string, len(o.TokenAt))
		for k, t := range o.TokenAt {
			tok[k] = strconv.Itoa(int(t))
		}
		_ = w.Write([]string{strconv.Itoa(o.Index), o.Class, strconv.Itoa(o.Input), strconv.Itoa(o.Output),
			strconv.FormatInt(int64(o.Scheduled), 10), strconv.FormatInt(int64(o.Sent), 10),
			strconv.FormatInt(int64(o.FirstToken), 10), strconv.FormatInt(int64(o.End), 10),
			strconv.Itoa(o.Tokens), strconv.Itoa(o.Chunks), strconv.Itoa(o.Status), o.Finish, o.Err, strings.Join(tok, " "),
			strconv.FormatInt(int64(o.Ready()+res.RouterOffset), 10), strconv.FormatInt(int64(o.QueueWait), 10), serverCount(o.PromptTokens)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// serverCount is a count the server gave, "" for none (-1).
func serverCount(n int) string {
	if n < 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// writeTable prints sim's table for the live runs, then what only a live
// run has: the schedule lag, and the client's latencies under the names
// vllm bench serve and AIPerf use.
// incomplete says how a stopped sweep falls short of its grid ("" when it
// was not stopped): the rate cut short, and the rates not run.
func (lc *liveRun) incomplete(results []liveResult, stopped bool) string {
	if !stopped {
		return ""
	}
	var parts []string
	if n := len(results); n > 0 && results[n-1].Meta.Partial {
		parts = append(parts, fmt.Sprintf("the run at %s req/s was cut short and is marked partial", fmtRate(results[n-1].Rate)))
	}
	if skipped := lc.rates[len(results):]; len(skipped) > 0 {
		rs := make([]string, len(skipped))
		for i, r := range skipped {
			rs[i] = fmtRate(r)
		}
		parts = append(parts, fmt.Sprintf("%d of %d rates not run (%s req/s)", len(skipped), len(lc.rates), strings.Join(rs, ", ")))
	}
	if len(parts) == 0 {
		return "stopped after the last rate ended"
	}
	return "stopped before the sweep ended: " + strings.Join(parts, "; ")
}

// writeTable prints the sim-style table of the rates run and the client
// side's; incomplete (a stopped sweep) takes the sustained verdict away.
func (lc *liveRun) writeTable(w io.Writer, results []liveResult, incomplete string) error {
	fleetName, n := "target "+lc.target, 1
	if lc.spec != nil {
		fleetName, n = lc.spec.Name, lc.spec.Size()
	}
	r := &sweep.Result{Trace: lc.trace.Name, Fleet: fleetName, Instances: n, Seed: lc.seed,
		SLO: sweep.SLOJSON{TTFT: lc.slo.TTFT.Seconds(), TPOT: lc.slo.TPOT.Seconds()}, BaseRate: lc.trace.MeanRate(),
		Arms: []string{lc.arm}, Cordons: lc.cordonSpec, Incomplete: incomplete}
	for _, x := range results {
		r.Rates = append(r.Rates, x.Rate)
		r.Runs = append(r.Runs, x.Score)
	}
	r.SetSustained()
	if len(results) > 0 {
		if err := sweep.WriteTable(w, r); err != nil {
			return err
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nclient side (latencies in ms; TTFT from the actual send, TPOT = (e2e - TTFT)/(n - 1), ITL = every gap between chunks; req/s and out tok/s of the requests that succeeded; docs/live.md):\n")
	fmt.Fprintf(&b, "%-8s %9s %26s %17s %15s %15s %17s %8s %10s %10s  %s\n", "rate", "sent", "schedule lag p50/p90/p99", "TTFT p50/p99", "TPOT p50/p99", "ITL p50/p99", "E2E p50/p99", "req/s", "out tok/s", "goodput", "status")
	for _, x := range results {
		s := x.Client
		status := "ok"
		var notes []string
		if s.Degraded {
			notes = append(notes, "DEGRADED")
		}
		if s.Partial {
			notes = append(notes, "PARTIAL")
		}
		if s.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%d errors", s.Errors))
		}
		if len(notes) > 0 {
			status = strings.Join(notes, ", ")
		}
		fmt.Fprintf(&b, "%-8s %9s %26s %17s %15s %15s %17s %8.2f %10.1f %10s  %s\n", fmtRate(x.Rate), fmt.Sprintf("%d/%d", s.Sent, s.Planned),
			fmt.Sprintf("%s/%s/%s ms", ms(s.Lag.P50), ms(s.Lag.P90), ms(s.Lag.P99)),
			pair(s.TTFT), pair(s.TPOT), pair(s.ITL), pair(s.E2E), s.RequestRPS, s.OutputTokensRPS, fmt.Sprintf("%.2f/s", s.GoodputRPS), status)
	}
	for _, x := range results {
		if x.Client.Degraded {
			fmt.Fprintf(&b, "DEGRADED at %s req/s: p99 schedule lag %s ms > %d ms: the load generator did not offer the planned load; do not compare this run\n",
				fmtRate(x.Rate), ms(x.Client.Lag.P99), loadgen.DegradedLag.Milliseconds())
		}
		if len(x.Client.ErrorKinds) > 0 {
			fmt.Fprintf(&b, "errors at %s req/s: %s\n", fmtRate(x.Rate), strings.Join(x.Client.ErrorKinds, "; "))
		}
		if x.Client.Partial {
			if x.Client.Sent < x.Client.Planned {
				fmt.Fprintf(&b, "PARTIAL at %s req/s: stopped after %d of %d requests\n", fmtRate(x.Rate), x.Client.Sent, x.Client.Planned)
			} else {
				fmt.Fprintf(&b, "PARTIAL at %s req/s: stopped after every request was sent; those still running were cancelled after the drain\n", fmtRate(x.Rate))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(s float64) string { return strconv.FormatFloat(s*1000, 'f', 1, 64) }

// pair is a latency's p50/p99 in milliseconds, one decimal, as vllm
// bench serve prints them (never in exponent notation).
func pair(q loadgen.Quantiles) string {
	if q.N == 0 {
		return "-"
	}
	return ms(q.P50) + "/" + ms(q.P99)
}

// fmtRate is the rate as the run's sim-style table above prints it.
func fmtRate(r float64) string { return sweep.FormatRate(r) }

// liveConfigHash fingerprints what determines a live run: the fleet's
// engines, the run's metadata (arm, rate, seed, trace, SLOs, target) and
// the load generator's settings.
func liveConfigHash(lc *liveRun, meta event.RunMeta) string {
	var profiles any
	if lc.spec != nil {
		profiles = lc.spec.Profiles()
	}
	b, _ := json.Marshal(struct {
		Profiles any
		Meta     event.RunMeta
		Endpoint string
		MaxConc  int
		Stub     bool
		Scale    float64
	}{profiles, meta, lc.lg.Endpoint, lc.lg.MaxConcurrency, lc.stub, lc.timeScale})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// playCordons cordons and uncordons the router's engines at the windows'
// times, counted from now (the load generator starts at once, at trace
// time 0), until the returned stop is called. A cordon the router refuses
// is said on stderr, and its window passes without an uncordon.
func playCordons(rt *live.Router, names []string, ws []sim.Cordon, stderr io.Writer) (stop func()) {
	if len(ws) == 0 {
		return func() {}
	}
	start := time.Now()
	var mu sync.Mutex
	var timers []*time.Timer
	refused := map[int]bool{}
	for i, w := range ws {
		name := names[w.Inst]
		timers = append(timers, time.AfterFunc(time.Until(start.Add(time.Duration(w.From))), func() {
			if _, err := rt.Cordon(name, true); err != nil {
				mu.Lock()
				refused[i] = true
				mu.Unlock()
				fmt.Fprintf(stderr, "narwhal-bench: live: --cordon %s at %v: refused, %s\n", name, time.Duration(w.From), routerErr(err))
			}
		}))
		timers = append(timers, time.AfterFunc(time.Until(start.Add(time.Duration(w.Until))), func() {
			mu.Lock()
			skip := refused[i]
			mu.Unlock()
			if !skip {
				_, _ = rt.Cordon(name, false)
			}
		}))
	}
	return func() {
		for _, t := range timers {
			t.Stop()
		}
	}
}
