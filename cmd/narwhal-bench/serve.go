package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/live"
	"github.com/narwhal-bench/narwhal-bench/live/ha"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
	"github.com/narwhal-bench/narwhal-bench/sweep"
)

// serveCommand is `narwhal-bench serve`: the live router in front of a
// fleet's engines, until SIGINT or SIGTERM.
func serveCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "route OpenAI-API traffic to a fleet's vLLM engines with the same core and controllers as sim (docs/serve.md)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "fleet", Required: true, Usage: "built-in fleet name (" + strings.Join(fleet.Builtin(), ", ") + ") or a fleet YAML file whose instances.list[].url name the engines"},
			&cli.StringFlag{Name: "arm", Value: "adaptive", Usage: "controller: static:kPmD, static:kPmD/alg1, aggregated, hybrid:kPmM, adaptive, arrow, planner, coldswap, dynamo, ray"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8000", Usage: "address the router serves on"},
			&cli.StringFlag{Name: "journal", Usage: "write every request, decision and role move to a Pebble journal in this directory"},
			&cli.StringFlag{Name: "model", Usage: "the model name clients must ask for (default: any, forwarded as sent; stub with --stub)"},
			&cli.IntFlag{Name: "base-port", Usage: "engines at 127.0.0.1:P+i instead of the fleet file's urls", DefaultText: "the urls; 8101 with --stub"},
			&cli.BoolFlag{Name: "stub", Usage: "first start stub engines for the fleet in this process (at --base-port, default 8101): a whole live fleet without a GPU"},
			&cli.Float64Flag{Name: "stub-time-scale", Value: 1, Usage: "with --stub: multiply the stubs' modelled durations (0 = zero cost)"},
			&cli.IntFlag{Name: "stub-mean-output", Usage: "with --stub: end answers at a natural length drawn from 1..2N tokens (0 = run to max_tokens, as stub --mean-output)"},
			&cli.BoolFlag{Name: "stub-allow-faults", Usage: "with --stub: the stubs serve POST /stub/faults, to inject engine faults (as stub --allow-faults; docs/stub.md)"},
			&cli.IntFlag{Name: "stub-max-model-len", Value: 32768, Usage: "with --stub: the stubs' context, prompt plus output tokens (as stub --max-model-len)"},
			&cli.BoolFlag{Name: "prefix-cache", Usage: "the engines keep prefix caches (vLLM's automatic prefix caching; with --stub, the stubs', sized by the fleet's prefix_cache): placement prices them, as sim --prefix-cache"},
			&cli.StringFlag{Name: "admission", Usage: "admission gate: open or queue (price each arrival's TTFT; queue it until it fits or its deadline passes); default: the fleet's, else open"},
			&cli.StringFlag{Name: "handoff-policy", Value: string(live.HandoffFail), Usage: "a prefill leg with no KV handoff: fail (502, journaled) or recompute (the decode engine prefills again, journaled)"},
			&cli.StringFlag{Name: "prefill-timeout", Value: "120s", Usage: "bound on one prefill leg (and on a streamed one-engine request's first event)"},
			&cli.StringFlag{Name: "first-token-timeout", Value: "30s", Usage: "bound on the wait for a streamed decode leg's first event (a non-streamed answer: --request-timeout)"},
			&cli.StringFlag{Name: "read-timeout", Value: "60s", Usage: "bound on the gap between two events of a decode leg"},
			&cli.StringFlag{Name: "request-timeout", Value: "1h", Usage: "bound on a request end to end (a backstop: --read-timeout keeps streams live)"},
			&cli.StringFlag{Name: "drain-timeout", Value: "10s", Usage: "on SIGINT or SIGTERM: how long requests in flight may finish before the rest are ended (503, or an error event mid-stream)"},
			&cli.IntFlag{Name: "max-in-flight", Value: 100000, Usage: "requests admitted and not ended at most; beyond it 429 with Retry-After"},
			&cli.IntFlag{Name: "max-tokens", Value: 131072, Usage: "largest max_tokens / max_completion_tokens accepted"},
			&cli.BoolFlag{Name: "tokenize", Usage: "count each prompt with an engine's POST /tokenize (its tokenizer and chat template) instead of the estimate of about 4 bytes a token: one more round trip per request"},
			&cli.StringFlag{Name: "tokenize-timeout", Value: "2s", Usage: "with --tokenize: bound on the count; past it the request takes the estimate"},
			&cli.StringFlag{Name: "allowed-origins", Value: "*", Usage: "browser origins allowed to call the /v1/ routes across origins (CORS), separated by commas: * for any, as vLLM's default; empty for none"},
		}, opsFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("serve: unexpected argument %q: every input is a flag", c.Args().First())}
			}
			spec, err := fleet.Load(c.String("fleet"))
			if err != nil {
				return usageError{fmt.Errorf("--fleet: %w", err)}
			}
			arm := c.String("arm")
			ctrl, err := core.NewController(arm, spec.Size())
			if err != nil {
				return usageError{fmt.Errorf("--arm: %w", err)}
			}
			sweep.AttachLiveRehearser(ctrl, sweep.SimConfig(spec, spec.CoreSLO(), c.Bool("prefix-cache")))
			adm := spec.CoreAdmission()
			if a := c.String("admission"); a != "" {
				if adm.Mode, err = core.ParseAdmissionMode(a); err != nil {
					return usageError{fmt.Errorf("--admission: %w", err)}
				}
			}
			cfg := live.Config{Fleet: spec, Controller: ctrl, Model: c.String("model"), Admission: adm,
				Handoff: live.HandoffPolicy(c.String("handoff-policy")), MaxInFlight: int(c.Int("max-in-flight")),
				MaxOutputTokens: int(c.Int("max-tokens")), Tokenize: c.Bool("tokenize")}
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
			origins, err := parseOrigins(c.String("allowed-origins"))
			if err != nil {
				return usageError{err}
			}
			if c.Bool("prefix-cache") {
				pc := spec.PrefixCacheSize()
				cfg.PrefixCache = &pc
			}
			var drain time.Duration
			for _, d := range []struct {
				flag string
				dst  *time.Duration
			}{{"prefill-timeout", &cfg.PrefillTimeout}, {"first-token-timeout", &cfg.FirstTokenTimeout},
				{"read-timeout", &cfg.ReadTimeout}, {"request-timeout", &cfg.RequestTimeout}, {"tokenize-timeout", &cfg.TokenizeTimeout},
				{"drain-timeout", &drain}} {
				v, err := time.ParseDuration(c.String(d.flag))
				if err != nil || v <= 0 {
					return usageError{fmt.Errorf("--%s %q: expected a positive duration such as 30s", d.flag, c.String(d.flag))}
				}
				*d.dst = v
			}
			base := int(c.Int("base-port"))
			if err := basePortErr(base, spec.Size()); err != nil {
				return usageError{err}
			}
			// The security flags are read before any stub starts, so a bad
			// one is the only thing the user sees.
			gate, certs, err := opsSetup(c, &cfg, stderr)
			if err != nil {
				return err
			}
			if c.Bool("stub") && cfg.Model == "" {
				// The stubs serve one model, stub: a body naming another
				// is the router's 404, never a request (as live --stub).
				cfg.Model = "stub"
			}
			if !c.Bool("stub") {
				for _, f := range []string{"stub-time-scale", "stub-mean-output", "stub-max-model-len", "stub-allow-faults"} {
					if c.IsSet(f) {
						return usageError{fmt.Errorf("--%s: only with --stub", f)}
					}
				}
			}
			if c.Bool("stub") {
				if base == 0 {
					base = stub.DefaultBasePort
				}
				ts := c.Float64("stub-time-scale")
				opts := stub.Options{Model: cfg.Model, TimeScale: &ts, PrefixCache: cfg.PrefixCache,
					MeanOutput: int(c.Int("stub-mean-output")), MaxModelLen: int(c.Int("stub-max-model-len")), AllowFaults: c.Bool("stub-allow-faults")}
				if opts.Model == "" {
					opts.Model = "stub"
				}
				sf, err := startStubs(spec, base, opts, stderr)
				if err != nil {
					return err
				}
				defer sf.Close()
			}
			if base > 0 {
				cfg.URLs = make([]string, spec.Size())
				for i := range cfg.URLs {
					cfg.URLs[i] = fmt.Sprintf("http://127.0.0.1:%d", base+i)
				}
			}
			noteEngineTLSUnused(c, engineURLs(spec, base), stderr)
			// High availability and security (ops.go): listen first, so a
			// standby answers while it waits for the leadership.
			ln, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return usageError{fmt.Errorf("--listen %q: %w", c.String("listen"), err)}
			}
			// ctx ends at the first SIGINT or SIGTERM (simcli.SignalContext);
			// a second one during the drain kills the process.
			front := &frontDoor{origins: origins}
			front.set(startingHandler())
			srv, stopHUP := listenAndServe(certs, ln, front.handler(gate), stderr)
			defer stopHUP() // after the drain: SIGHUP never ends the router undrained
			defer srv.Close()
			var node *ha.Node
			var lost <-chan struct{}
			jdir := c.String("journal")
			if c.String("ha") != "" && jdir != "" {
				// Each leadership term is a run of its own, DIR/epoch-N: a
				// router restarted as a standby (the same --journal) must
				// be able to lead again. A DIR that is itself one run is
				// refused now, not when this router is elected.
				if journal.LooksLikeRun(jdir) {
					return usageError{fmt.Errorf("--journal %s holds one run's journal: under --ha each leadership term is journaled in DIR/epoch-N, so DIR must be a directory of terms (a new one, or one an earlier --ha start used)", jdir)}
				}
				if err := os.MkdirAll(jdir, 0o755); err != nil {
					return usageError{fmt.Errorf("--journal %s: %w", jdir, err)}
				}
			}
			if c.String("ha") != "" {
				if node, err = joinHA(ctx, c, spec, &cfg, front, haName(ln.Addr()), stderr); err != nil || node == nil {
					_ = srv.Close()
					return err
				}
				defer node.Close()
				lost = node.Done()
			}
			rec := &journalRecorder{}
			cfg.Recorder = rec
			rt, err := live.New(cfg)
			if err != nil {
				return usageError{err}
			}
			if gate != nil {
				rt.Metrics().Registry().MustRegister(gate) // narwhal_tenant_*
			}
			var w *journal.Writer
			if dir := jdir; dir != "" {
				if node != nil {
					dir = filepath.Join(dir, fmt.Sprintf("epoch-%d", cfg.Epoch))
				}
				slo := spec.CoreSLO()
				meta := event.RunMeta{Version: version, Driver: "live", Arm: arm, Fleet: spec.Name, Instances: spec.Size(),
					GPUs: spec.Size() * spec.GPUsPerInstance, TTFTSLO: slo.TTFT.Seconds(), TPOTSLO: slo.TPOT.Seconds(),
					StartUnixNano: rt.Start().UnixNano(), PrefixCache: cfg.PrefixCache != nil}
				if w, err = journal.Create(dir, meta, journal.Options{}); err != nil {
					return usageError{fmt.Errorf("--journal: %w", err)}
				}
				rec.w = w
				front.jw.Store(w)
			}
			runErr := make(chan error, 1)
			rctx, rcancel := context.WithCancel(context.Background())
			go func() { runErr <- rt.Run(rctx) }()
			front.set(rt.Handler())
			fmt.Fprintf(stderr, "narwhal-bench: serving %s (%s, %d engines) at %s://%s\n", arm, spec.Name, spec.Size(), scheme(c), ln.Addr())
			if ta, ok := ln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() && gate == nil && (certs == nil || certs.clientCAs == nil) {
				fmt.Fprintf(stderr, "narwhal-bench: note: %s is reachable beyond this machine and --tenants is not set: anyone who reaches it may send requests and read /state (engine URLs), /metrics and /journal (docs/security.md)\n", ln.Addr())
			}
			if w != nil {
				go flushEvery(rctx, w, time.Second) // until the router stops, before the journal closes
			}
			if node != nil {
				go node.PublishEvery(rctx, rt, 250*time.Millisecond)
			}
			var lostErr error
			select {
			case <-ctx.Done():
			case <-lost:
				// The lease lapsed: admissions stopped already (the fence);
				// finish what is in flight and exit for a restart as standby.
				lostErr = errors.New("serve: lost the high-availability lease: another router may lead now")
				fmt.Fprintln(stderr, "narwhal-bench:", lostErr)
			}
			if node != nil {
				// Resign before the drain: a standby takes over now, not
				// when the drain ends (the fence already stops admissions
				// here).
				_ = node.Close()
			}
			fmt.Fprintf(stderr, "narwhal-bench: serve: shutting down (in-flight requests get %v)\n", drain)
			sctx, scancel := context.WithTimeout(context.Background(), drain)
			defer scancel()
			shutErr := srv.Shutdown(sctx)
			rcancel()
			err = <-runErr
			if shutErr != nil {
				// The drain deadline passed: the router's stop ended what
				// was left (journaled fail, unavailable) and cut its legs;
				// give the handlers a moment to tell their clients (503,
				// or an error event mid-stream) before the process exits.
				ectx, ecancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = srv.Shutdown(ectx)
				ecancel()
			}
			if w != nil {
				if err != nil || lostErr != nil {
					// The router stopped on an error or lost its lease: the
					// journal holds what it saw, marked partial.
					err = errors.Join(err, w.ClosePartial(errors.Join(err, lostErr).Error()))
				} else {
					err = errors.Join(err, w.Close())
				}
			}
			if shutErr != nil && !errors.Is(shutErr, context.DeadlineExceeded) {
				err = errors.Join(err, shutErr)
			}
			return errors.Join(err, lostErr)
		},
	}
}

// flushEvery makes the journal durable every period, so a crash loses at
// most that much of what was acknowledged to clients.
func flushEvery(ctx context.Context, w *journal.Writer, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = w.Flush()
		}
	}
}

// journalRecorder forwards the router's records to a journal once one is
// open (the router's clock starts before the journal's metadata is
// written, and records flow only once Run starts).
type journalRecorder struct{ w *journal.Writer }

// Record implements event.Recorder.
func (j *journalRecorder) Record(r *event.Record) {
	if j.w != nil {
		j.w.Record(r)
	}
}

// parseOrigins reads --allowed-origins: "*", or origins (scheme://host,
// with a port when not the scheme's) separated by commas; "" is none.
func parseOrigins(v string) ([]string, error) {
	var out []string
	for _, o := range strings.Split(v, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if o != "*" {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
				return nil, fmt.Errorf("--allowed-origins: %q: expected * or origins such as https://chat.example.com or http://localhost:3000, separated by commas", o)
			}
		}
		out = append(out, o)
	}
	return out, nil
}
