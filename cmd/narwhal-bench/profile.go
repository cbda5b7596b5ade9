package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// profileCommand is `narwhal-bench profile --fleet FILE`: measure each
// engine of a fleet file (prefill times over a sweep of prompt lengths,
// decode gaps over a sweep of concurrencies), fit its timing profile with
// timing.FitProfile, compare it with the file's, and optionally write a
// copy of the file with the fits (docs/fleet.md#measuring-a-profile).
func profileCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "profile",
		Usage: "measure each engine of a fleet file and fit its timing profile (prefill T(n), decode I(ctx)); --write a copy of the file with the fits (docs/fleet.md)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "fleet", Required: true, Usage: "fleet YAML file whose instances.list[].url name the engines to measure"},
			&cli.StringSliceFlag{Name: "only", Usage: "measure only the engine of this name (repeatable)", DefaultText: "every engine"},
			&cli.StringFlag{Name: "model", Usage: "the model field of every request", DefaultText: "the first model each engine's GET /v1/models lists"},
			&cli.StringFlag{Name: "prefill-lens", Value: "256,512,1024,2048,4096,8192,12288,16384", Usage: "prompt lengths of the prefill sweep, in tokens (at least 3 distinct)"},
			&cli.IntFlag{Name: "prefill-repeats", Value: 3, Usage: "prompts per length in the prefill sweep (the fit takes each length's median)"},
			&cli.StringFlag{Name: "decode-concurrency", Value: "1,4,16,48", Usage: "concurrent streams of the decode sweep, one wave per value (at least 2 distinct)"},
			&cli.IntFlag{Name: "decode-tokens", Value: 64, Usage: "tokens each decode stream writes (max_tokens = min_tokens, ignore_eos; at least 2)"},
			&cli.IntFlag{Name: "decode-prompt", Value: 512, Usage: "prompt tokens of each decode stream"},
			&cli.StringFlag{Name: "request-timeout", Value: "300s", Usage: "bound on one measured request (a prefill, or a whole decode stream); GET /health, /metrics, /v1/models and POST /tokenize are bounded by 10s"},
			&cli.BoolFlag{Name: "force", Usage: "measure an engine that is not idle (vLLM's /metrics shows requests running or waiting) instead of refusing it; its profile is then wrong"},
			&cli.StringFlag{Name: "write", Usage: "write a copy of the fleet file to this path, each measured engine's profile replaced by its fit (everything else kept as written, comments outside the replaced profiles included)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (samples included)"},
		}, engineFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error {
			pc, err := profileConfig(c, stderr)
			if err != nil {
				return err
			}
			return pc.run(ctx, c.Root().Writer, stderr)
		},
	}
}

// profileRun is a resolved `profile` command line.
type profileRun struct {
	path         string
	spec         *fleet.Spec
	engines      []int // indices into the fleet, in fleet order
	model        string
	prefillLens  []int
	lensSet      bool // --prefill-lens given: its lengths are not trimmed to an engine's context
	repeats      int
	conc         []int
	decodeToks   int
	decodePrompt int
	timeout      time.Duration
	force        bool
	write        string
	json         bool
	client       *http.Client
	// closeIdle closes the transport's idle connections when the command
	// ends (no connection outlives it).
	closeIdle func()
}

// probeTimeout bounds the small calls: /health, /metrics, /v1/models,
// /tokenize.
const probeTimeout = 10 * time.Second

func profileConfig(c *cli.Command, stderr io.Writer) (*profileRun, error) {
	if c.Args().Len() > 0 {
		return nil, usageError{fmt.Errorf("profile: unexpected argument %q: every input is a flag", c.Args().First())}
	}
	pc := &profileRun{path: c.String("fleet"), model: c.String("model"), repeats: int(c.Int("prefill-repeats")),
		decodeToks: int(c.Int("decode-tokens")), decodePrompt: int(c.Int("decode-prompt")),
		force: c.Bool("force"), write: c.String("write"), json: c.Bool("json")}
	var err error
	pc.lensSet = c.IsSet("prefill-lens")
	if pc.prefillLens, err = intList("prefill-lens", c.String("prefill-lens"), 3, "prompt lengths in tokens"); err != nil {
		return nil, err
	}
	if pc.conc, err = intList("decode-concurrency", c.String("decode-concurrency"), 2, "stream counts"); err != nil {
		return nil, err
	}
	switch {
	case pc.repeats < 1:
		return nil, usageError{fmt.Errorf("--prefill-repeats %d: expected at least 1", pc.repeats)}
	case pc.decodeToks < 2:
		return nil, usageError{fmt.Errorf("--decode-tokens %d: expected at least 2 (a gap needs two tokens)", pc.decodeToks)}
	case pc.decodePrompt < 1:
		return nil, usageError{fmt.Errorf("--decode-prompt %d: expected at least 1 token", pc.decodePrompt)}
	}
	if pc.timeout, err = time.ParseDuration(c.String("request-timeout")); err != nil || pc.timeout <= 0 {
		return nil, usageError{fmt.Errorf("--request-timeout %q: expected a positive duration such as 300s", c.String("request-timeout"))}
	}
	if pc.spec, err = profileFleet(pc.path); err != nil {
		return nil, err
	}
	names := pc.spec.Names()
	only := c.StringSlice("only")
	for i, n := range names {
		if len(only) == 0 || slices.Contains(only, n) {
			pc.engines = append(pc.engines, i)
		}
	}
	for _, o := range only {
		if !slices.Contains(names, o) {
			return nil, usageError{fmt.Errorf("--only %q: no such engine in fleet %s: expected one of %s", o, pc.path, strings.Join(names, ", "))}
		}
	}
	// The engines are reached as serve reaches them: its key and TLS
	// flags, on a transport of this command's own (closed at its end).
	base := live.NewTransport()
	tr, err := engineTransport(c, base)
	if err != nil {
		return nil, err
	}
	if tr == nil {
		tr = base
	}
	noteEngineTLSUnused(c, pc.spec.URLs(), stderr)
	pc.client = &http.Client{Transport: tr}
	pc.closeIdle = base.CloseIdleConnections
	if pc.write != "" {
		if st, err := os.Stat(pc.write); err == nil && st.IsDir() {
			return nil, usageError{fmt.Errorf("--write %q: a directory: expected a file path", pc.write)}
		}
		if st, err := os.Stat(filepath.Dir(pc.write)); err != nil || !st.IsDir() {
			return nil, usageError{fmt.Errorf("--write %q: no directory %s: expected a file path in an existing directory", pc.write, filepath.Dir(pc.write))}
		}
		// The splice tried now, with the file's own profiles, so a file
		// --write cannot edit is said before minutes of measuring.
		data, err := os.ReadFile(pc.path)
		if err != nil {
			return nil, usageError{fmt.Errorf("--fleet %s: %w", pc.path, err)}
		}
		now := map[int]timing.Profile{}
		profiles := pc.spec.Profiles()
		for _, i := range pc.engines {
			now[i] = profiles[i]
		}
		if _, err := spliceProfiles(data, now); err != nil {
			return nil, usageError{fmt.Errorf("--write %s: the fleet file %s cannot be rewritten: %w", pc.write, pc.path, err)}
		}
	}
	return pc, nil
}

// intList parses a comma-separated list of positive integers for --flag,
// with at least minDistinct distinct values; it returns them sorted and
// without repeats.
func intList(flag, s string, minDistinct int, what string) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, usageError{fmt.Errorf("--%s %q: %q: expected a comma-separated list of integers >= 1 (%s)", flag, s, f, what)}
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	if len(out) < minDistinct {
		return nil, usageError{fmt.Errorf("--%s %q: %d distinct values: expected at least %d (the fit needs them)", flag, s, len(out), minDistinct)}
	}
	sort.Ints(out)
	return out, nil
}

// placeholderProfile is a profile line a fleet file of engines not yet
// measured can carry (the fleet file wants one per engine).
const placeholderProfile = "profile: {a: 0, b: 1.0e-4, c: 0.03, slope: 1.0e-6, intercept: 0.02}"

// profileFleet loads the fleet file for profile: a file (a built-in fleet
// names no engines) whose instances.list names each engine's url.
func profileFleet(path string) (*fleet.Spec, error) {
	if slices.Contains(fleet.Builtin(), path) {
		if _, err := os.Stat(path); err != nil {
			return nil, usageError{fmt.Errorf("--fleet %s: a built-in fleet, which names no engines (no urls): expected a fleet YAML file whose instances.list[].url name the engines to measure", path)}
		}
	}
	spec, err := fleet.Load(path)
	if err != nil {
		if strings.Contains(err.Error(), ".profile") {
			// A fleet of new engines has no profiles yet: the file
			// wants one each all the same.
			return nil, usageError{fmt.Errorf("--fleet: %w (engines not measured yet: give each any placeholder profile, such as %s; --write replaces it with the fit)", err, placeholderProfile)}
		}
		return nil, usageError{fmt.Errorf("--fleet: %w", err)}
	}
	if len(spec.Instances.List) == 0 {
		return nil, usageError{fmt.Errorf("--fleet %s: instances.count %d, no urls: expected instances.list with each engine's url (http://HOST:PORT) to measure", path, spec.Size())}
	}
	if _, errs := checkFleet(path, 0); len(errs) > 0 {
		// profile has no --base-port: the urls are the file's.
		msg := strings.ReplaceAll(strings.Join(errs, "; "), " (or --base-port)", "")
		return nil, usageError{fmt.Errorf("--fleet %s: %s", path, msg)}
	}
	return spec, nil
}

// profileResult is the command's result (its --json).
type profileResult struct {
	Fleet   string          `json:"fleet"`
	Engines []engineProfile `json:"engines"`
	// Written is --write's path when the copy was written.
	Written string `json:"written,omitempty"`
}

// engineProfile is one engine's measurements and fit.
type engineProfile struct {
	Name        string `json:"name"`
	URL         string `json:"url"`
	Model       string `json:"model,omitempty"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
	// Tokens says where the prompts' token counts came from: "tokenize"
	// (the engine's POST /tokenize) or "estimate" (no /tokenize: about
	// 4 bytes a token, each prefill sample's count from its answer's
	// usage where it has one).
	Tokens string `json:"tokens,omitempty"`
	// Busy is the engine's running and waiting requests before the
	// sweep (measured anyway with --force).
	Busy    *busyState      `json:"busy,omitempty"`
	Fit     *timing.Profile `json:"fit,omitempty"`
	Current timing.Profile  `json:"current"`
	Prefill *curveReport    `json:"prefill,omitempty"`
	Decode  *curveReport    `json:"decode,omitempty"`
	// Warnings are said with the result: a coefficient the fleet file
	// refuses, a noisy fit, a busy engine.
	Warnings []string `json:"warnings,omitempty"`
	// Error is why the engine has no fit ("" when it has one).
	Error string `json:"error,omitempty"`
}

type busyState struct {
	Running float64 `json:"running"`
	Waiting float64 `json:"waiting"`
}

// curveReport is one curve's samples and how well the fit follows them.
type curveReport struct {
	Samples []sampleJSON `json:"samples"`
	// R2 is the coefficient of determination over the samples the fit
	// used (prefill: every sample, against the fit of the medians;
	// decode: all but the outliers); null when it is not defined (no
	// samples, or samples that do not vary).
	R2 *float64 `json:"r2"`
	// Points are the sweep's points (prefill: each length's median;
	// decode: each concurrency's means, outliers left out) against the
	// fit and the fleet file's current profile.
	Points []pointReport `json:"points"`
	// MaxResidual is the largest |measured - fit| / measured over Points.
	MaxResidual float64 `json:"max_rel_residual"`
	// Outliers is how many decode gaps the fit left out (far from a first
	// line: a stall); Samples holds them too.
	Outliers int `json:"outliers,omitempty"`
}

type sampleJSON struct {
	X float64 `json:"x"`
	Y float64 `json:"seconds"`
}

type pointReport struct {
	// Sweep is the swept value: a prompt length, or a concurrency.
	Sweep    int     `json:"sweep"`
	X        float64 `json:"x"`
	Measured float64 `json:"measured"`
	Fit      float64 `json:"fit"`
	Current  float64 `json:"current"`
	// VsCurrent is (fit - current) / current (null when current is 0).
	VsCurrent *float64 `json:"fit_vs_current"`
}

func (pc *profileRun) run(ctx context.Context, stdout, stderr io.Writer) error {
	defer pc.closeIdle()
	names, urls, current := pc.spec.Names(), pc.spec.URLs(), pc.spec.Profiles()
	probes := make([]*engineProbe, len(pc.engines))
	res := &profileResult{Fleet: pc.path}
	// Every engine is checked before any is measured: a down, busy or
	// too-short engine is said at once, not after minutes of sweeps.
	failed := 0
	for k, i := range pc.engines {
		ep := engineProfile{Name: names[i], URL: strings.TrimRight(urls[i], "/"), Current: current[i]}
		p := &engineProbe{pc: pc, name: ep.Name, base: ep.URL, progress: stderr}
		probes[k] = p
		if err := p.preflight(ctx, &ep); err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx)
			}
			var ue usageError
			if errors.As(err, &ue) {
				return err
			}
			ep.Error = err.Error()
			failed++
		}
		res.Engines = append(res.Engines, ep)
	}
	if failed > 0 {
		for _, ep := range res.Engines {
			if ep.Error != "" {
				fmt.Fprintf(stderr, "narwhal-bench: profile %s: %s\n", ep.Name, ep.Error)
			}
		}
		return fmt.Errorf("profile: %d of %d engines failed their checks: nothing measured", failed, len(res.Engines))
	}
	for k := range probes {
		ep := &res.Engines[k]
		if err := probes[k].measure(ctx, ep); err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx)
			}
			ep.Error = err.Error()
			failed++
			fmt.Fprintf(stderr, "narwhal-bench: profile %s: %s\n", ep.Name, ep.Error)
		}
	}
	var writeErr error
	if pc.write != "" {
		fits := map[int]timing.Profile{}
		for k, i := range pc.engines {
			if ep := res.Engines[k]; ep.Fit != nil && ep.Fit.Validate() == nil {
				fits[i] = *ep.Fit
			}
		}
		if len(fits) == 0 {
			writeErr = fmt.Errorf("--write %s: no engine has a fit the fleet file accepts: not written", pc.write)
		} else if writeErr = writeFleetCopy(pc.path, pc.write, fits); writeErr == nil {
			res.Written = pc.write
			if len(fits) < len(pc.engines) {
				fmt.Fprintf(stderr, "narwhal-bench: profile: %s written with %d of %d engines' fits; the others keep their profiles\n", pc.write, len(fits), len(pc.engines))
			}
		}
	}
	if pc.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		writeProfileText(stdout, res)
	}
	if writeErr != nil {
		return writeErr
	}
	if failed > 0 {
		return fmt.Errorf("profile: %d of %d engines were not measured", failed, len(res.Engines))
	}
	for _, ep := range res.Engines {
		if ep.Fit != nil && ep.Fit.Validate() != nil {
			return fmt.Errorf("profile: engine %s's fit is refused by the fleet file (see its warnings)", ep.Name)
		}
	}
	return nil
}

// interrupted is the error of a command that ctx stopped (exit 130).
func interrupted(ctx context.Context) error {
	return fmt.Errorf("profile: %w", context.Cause(ctx))
}

// roundSig rounds x to n significant digits: more than a measurement
// holds would be noise in the fleet file.
func roundSig(x float64, n int) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', n, 64), 64)
	return v
}

// fmtCoef writes a coefficient as the fleet file and the paste line hold
// it.
func fmtCoef(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// profileYAML is the `profile:` line to paste into a fleet file.
func profileYAML(p timing.Profile) string {
	return fmt.Sprintf("{a: %s, b: %s, c: %s, slope: %s, intercept: %s}",
		fmtCoef(p.A), fmtCoef(p.B), fmtCoef(p.C), fmtCoef(p.Slope), fmtCoef(p.Intercept))
}

func writeProfileText(w io.Writer, res *profileResult) {
	for k, ep := range res.Engines {
		if k > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "engine %s  %s", ep.Name, ep.URL)
		if ep.Model != "" {
			fmt.Fprintf(w, "  model %s", ep.Model)
		}
		if ep.MaxModelLen > 0 {
			fmt.Fprintf(w, "  context %d", ep.MaxModelLen)
		}
		fmt.Fprintln(w)
		if ep.Tokens == "estimate" {
			fmt.Fprintln(w, "  tokens: ESTIMATED (the engine has no POST /tokenize): prompts sized at about 4 bytes a token; each prefill sample's count is its answer's usage.prompt_tokens where it gives one")
		}
		if ep.Error != "" {
			fmt.Fprintf(w, "  FAILED: %s\n", ep.Error)
			continue
		}
		if ep.Fit == nil {
			continue
		}
		f := ep.Fit
		fmt.Fprintf(w, "  fit      a %s  b %s  c %s  slope %s  intercept %s\n", fmtCoef(f.A), fmtCoef(f.B), fmtCoef(f.C), fmtCoef(f.Slope), fmtCoef(f.Intercept))
		pr, dr := ep.Prefill, ep.Decode
		fmt.Fprintf(w, "  prefill  %d samples: R² %s, largest residual of a length's median %.1f%%\n", len(pr.Samples), fmtR2(pr.R2), 100*pr.MaxResidual)
		out := ""
		if dr.Outliers > 0 {
			out = fmt.Sprintf(" (%d left out of the fit: far from the line)", dr.Outliers)
		}
		fmt.Fprintf(w, "  decode   %d gaps%s: R² %s, largest residual of a concurrency's mean %.1f%%\n", len(dr.Samples), out, fmtR2(dr.R2), 100*dr.MaxResidual)
		fmt.Fprintf(w, "  %-22s %12s %12s %12s %12s\n", "", "measured s", "fit s", "fleet file s", "fit vs file")
		for _, p := range pr.Points {
			fmt.Fprintf(w, "  %-22s %12.4g %12.4g %12.4g %12s\n", fmt.Sprintf("T(%.0f)", p.X), p.Measured, p.Fit, p.Current, signedPct(p.VsCurrent))
		}
		for _, p := range dr.Points {
			fmt.Fprintf(w, "  %-22s %12.4g %12.4g %12.4g %12s\n", fmt.Sprintf("I(%.0f) (%d %s)", p.X, p.Sweep, plural(p.Sweep, "stream")), p.Measured, p.Fit, p.Current, signedPct(p.VsCurrent))
		}
		for _, warn := range ep.Warnings {
			fmt.Fprintf(w, "  WARNING: %s\n", warn)
		}
		fmt.Fprintf(w, "  profile: %s\n", profileYAML(*f))
	}
	if res.Written != "" {
		fmt.Fprintf(w, "\nwrote %s\n", res.Written)
	}
}

func signedPct(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100**x)
}

func fmtR2(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.4f", *r)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
