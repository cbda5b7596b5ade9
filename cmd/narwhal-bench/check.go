package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// checkCommand is `narwhal-bench check --fleet FILE [--probe]`: validate a
// fleet file offline (every error listed, exit 2), and with --probe check
// it against the running engines: each reachable, serving the model, and
// each prefill->decode pair able to hand off KV (docs/operations.md).
func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate a fleet file (every error listed); with --probe, check its engines and every prefill->decode KV handoff",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "fleet", Required: true, Usage: "fleet YAML file (or built-in name) whose instances.list[].url name the engines"},
			&cli.BoolFlag{Name: "probe", Usage: "also check the engines online: /health, /v1/models, one tiny two-leg request per prefill->decode pair"},
			&cli.StringFlag{Name: "model", Usage: "the model every engine must serve (default: the first engine's first model)"},
			&cli.IntFlag{Name: "base-port", Usage: "engines at 127.0.0.1:P+i instead of the fleet file's urls"},
			&cli.StringFlag{Name: "timeout", Value: "30s", Usage: "bound on each probe request"},
		}, engineFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("check: unexpected argument %q: every input is a flag", c.Args().First())}
			}
			out := c.Root().Writer
			path := c.String("fleet")
			base := int(c.Int("base-port"))
			spec, errs := checkFleet(path, base)
			if len(errs) > 0 {
				fmt.Fprintf(out, "fleet %s: %d error(s):\n", path, len(errs))
				for _, e := range errs {
					fmt.Fprintf(out, "  %s\n", e)
				}
				return usageError{fmt.Errorf("check: fleet %s has %d error(s)", path, len(errs))}
			}
			fmt.Fprintf(out, "fleet %s: ok (%d engines)\n", path, spec.Size())
			if !c.Bool("probe") {
				return nil
			}
			timeout, err := time.ParseDuration(c.String("timeout"))
			if err != nil || timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %q: expected a positive duration such as 30s", c.String("timeout"))}
			}
			tr, err := engineTransport(c, nil) // as serve reaches the engines
			if err != nil {
				return err
			}
			urls := engineURLs(spec, base)
			failed := probeFleet(ctx, out, spec.Names(), urls, c.String("model"), timeout, tr)
			if failed > 0 {
				return fmt.Errorf("check: %d probe(s) failed", failed)
			}
			return nil
		},
	}
}

func engineURLs(spec *fleet.Spec, base int) []string {
	if base > 0 {
		urls := make([]string, spec.Size())
		for i := range urls {
			urls[i] = fmt.Sprintf("http://127.0.0.1:%d", base+i)
		}
		return urls
	}
	return spec.URLs()
}

// basePortErr checks --base-port P for n engines (0: the fleet file's
// urls): they listen on P to P+n-1.
func basePortErr(base, n int) error {
	if base < 0 || base > 0 && base+n-1 > 65535 {
		return fmt.Errorf("--base-port %d: %d engines on ports %d to %d: expected ports from 1 to 65535", base, n, base, base+n-1)
	}
	return nil
}

// checkFleet loads and validates a fleet file and what the router needs
// of it: every error, one per line.
func checkFleet(path string, base int) (*fleet.Spec, []string) {
	spec, err := fleet.Load(path)
	if err != nil {
		var lines []string
		for _, l := range strings.Split(err.Error(), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
		return nil, lines
	}
	var errs []string
	if err := basePortErr(base, spec.Size()); err != nil {
		return spec, []string{err.Error()}
	}
	if base == 0 && len(spec.Instances.List) == 0 {
		// A fleet of instances.count (the simulator's) names no engines:
		// one line, not one per missing url of a list the file lacks.
		return spec, []string{fmt.Sprintf("instances: %d engines by count, no urls: expected instances.list with each engine's url (http://HOST:PORT), or --base-port P for engines at 127.0.0.1:P+i (a fleet for sim only needs no check)", spec.Size())}
	}
	seen := map[string]string{}
	names := spec.Names()
	for i, u := range engineURLs(spec, base) {
		switch pu, err := url.Parse(u); {
		case u == "":
			errs = append(errs, fmt.Sprintf("instances.list[%d].url (%s): missing: expected http://HOST:PORT (or --base-port)", i, names[i]))
		case err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.Port() == "":
			errs = append(errs, fmt.Sprintf("instances.list[%d].url (%s): %q: expected http://HOST:PORT", i, names[i], u))
		default:
			key := strings.TrimRight(u, "/")
			if other, dup := seen[key]; dup {
				errs = append(errs, fmt.Sprintf("instances.list[%d].url (%s): %q also names %s: expected one engine per url", i, names[i], u, other))
			}
			seen[key] = names[i]
		}
	}
	return spec, errs
}

// probeFleet checks each engine and each ordered pair; it prints two
// tables and returns how many checks failed.
func probeFleet(ctx context.Context, out io.Writer, names, urls []string, model string, timeout time.Duration, tr http.RoundTripper) int {
	client := &http.Client{Timeout: timeout, Transport: tr} // nil: Go's default
	failed := 0
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "engine\turl\treach\tmodel\tverdict")
	live := make([]bool, len(urls))
	for i, u := range urls {
		reach, served := "-", "-"
		verdict := "ok"
		if err := getOK(ctx, client, u+"/health", nil); err != nil {
			reach, verdict = "FAIL", err.Error()
		} else {
			reach = "ok"
			var models struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			if err := getOK(ctx, client, u+"/v1/models", &models); err != nil {
				served, verdict = "FAIL", err.Error()
			} else {
				var ids []string
				for _, d := range models.Data {
					ids = append(ids, d.ID)
				}
				if model == "" && len(ids) > 0 {
					model = ids[0]
				}
				served = strings.Join(ids, ",")
				if !contains(ids, model) {
					verdict = fmt.Sprintf("serves [%s], not %s", served, model)
				}
			}
		}
		if verdict == "ok" {
			live[i] = true
		} else {
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", names[i], u, reach, served, verdict)
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "prefill -> decode\thandoff\ttokens\ttime\tverdict")
	for a := range urls {
		for b := range urls {
			if a == b {
				continue
			}
			pair := names[a] + " -> " + names[b]
			if !live[a] || !live[b] {
				fmt.Fprintf(tw, "%s\t-\t-\t-\tSKIP (an engine failed above)\n", pair)
				continue
			}
			start := time.Now()
			keys, tokens, err := handoffProbe(ctx, client, urls[a], urls[b], model)
			verdict, hand := "ok", strings.Join(keys, ",")
			if err != nil {
				verdict = "FAIL " + err.Error()
				failed++
			}
			if hand == "" {
				hand = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", pair, hand, tokens, time.Since(start).Round(time.Millisecond), verdict)
		}
	}
	tw.Flush()
	return failed
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func getOK(ctx context.Context, client *http.Client, u string, into any) error {
	q, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(q)
	if err != nil {
		return fmt.Errorf("unreachable: %v", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %d", resp.StatusCode)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			return fmt.Errorf("unreadable answer: %v", err)
		}
	}
	return nil
}

// handoffProbe runs the router's two legs once: a prefill leg on pu
// (max_tokens 1, do_remote_decode) whose handoff a decode leg on du
// consumes (max_tokens 2). It returns the handoff's keys and the decode's
// output tokens.
func handoffProbe(ctx context.Context, client *http.Client, pu, du, model string) ([]string, int, error) {
	raw := map[string]json.RawMessage{}
	mj, _ := json.Marshal(model)
	raw["model"] = mj
	raw["prompt"] = json.RawMessage(`"narwhal-bench check: a tiny prompt to move between engines"`)
	raw["max_tokens"] = json.RawMessage(`2`)
	raw["temperature"] = json.RawMessage(`0`)
	body, err := api.PrefillBody(raw)
	if err != nil {
		return nil, 0, err
	}
	rb, err := postJSON(ctx, client, pu+"/v1/completions", body)
	if err != nil {
		return nil, 0, fmt.Errorf("prefill leg: %v", err)
	}
	handoff := api.Handoff(rb)
	if handoff == nil {
		return nil, 0, errors.New("the prefill leg returned no kv_transfer_params (is the engine running the NIXL connector?)")
	}
	var kv map[string]json.RawMessage
	_ = json.Unmarshal(handoff, &kv)
	var keys []string
	for _, k := range []string{"remote_engine_id", "remote_request_id", "remote_block_ids", "remote_host", "remote_port"} {
		if _, ok := kv[k]; ok {
			keys = append(keys, strings.TrimPrefix(k, "remote_"))
		}
	}
	db, err := api.DecodeBody(raw, handoff)
	if err != nil {
		return keys, 0, err
	}
	rb, err = postJSON(ctx, client, du+"/v1/completions", db)
	if err != nil {
		return keys, 0, fmt.Errorf("decode leg: %v", err)
	}
	var v struct {
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(rb, &v) != nil || v.Usage == nil || v.Usage.CompletionTokens < 1 {
		return keys, 0, errors.New("the decode leg accepted the handoff and produced no tokens")
	}
	return keys, v.Usage.CompletionTokens, nil
}

func postJSON(ctx context.Context, client *http.Client, u string, body []byte) ([]byte, error) {
	q, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	q.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(q)
	if err != nil {
		return nil, fmt.Errorf("unreachable: %v", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, fmt.Errorf("answered %d: %s", resp.StatusCode, msg)
	}
	return b, nil
}
