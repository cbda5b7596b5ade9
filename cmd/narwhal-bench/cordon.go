package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/live"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// cordonCommand is `narwhal-bench cordon --router URL --engine NAME
// [--wait D] [--uncordon]`: take an engine of a running router out of
// service for maintenance (its legs finish, no new ones), optionally wait
// until the legs on it have finished, or return it to service
// (docs/operations.md, "Maintenance").
func cordonCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "cordon",
		Usage: "take an engine of a running router out of service for maintenance (its legs finish, no new ones go there), --wait until it holds none; --uncordon returns it",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "router", Required: true, Usage: "the router's base URL (serve --listen)"},
			&cli.StringFlag{Name: "engine", Required: true, Usage: "the engine's name in the fleet file (GET /state lists them)"},
			&cli.StringFlag{Name: "wait", Value: "0s", Usage: "after cordoning, wait up to this long until no leg is left on the engine (0: do not wait); exit 1 if some still are"},
			&cli.BoolFlag{Name: "uncordon", Usage: "return the engine to service instead"},
			&cli.StringFlag{Name: "api-key-env", Usage: "an admin tenant's key for the router (serve --tenants), from this environment variable"},
		}, routerClientFlags("--router")...),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("cordon: unexpected argument %q: every input is a flag", c.Args().First())}
			}
			base := strings.TrimRight(c.String("router"), "/")
			if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError{fmt.Errorf("--router %q: expected the router's base URL, http(s)://HOST:PORT", c.String("router"))}
			}
			wait, err := time.ParseDuration(c.String("wait"))
			if err != nil || wait < 0 {
				return usageError{fmt.Errorf("--wait %q: expected a duration of 0 or more, such as 10m", c.String("wait"))}
			}
			if wait > 0 && c.Bool("uncordon") {
				return usageError{errors.New("--wait: only when cordoning (an uncordoned engine has nothing to wait for)")}
			}
			key := ""
			if v := c.String("api-key-env"); v != "" {
				if key = os.Getenv(v); key == "" {
					return usageError{fmt.Errorf("--api-key-env %s: the variable is empty or unset", v)}
				}
			}
			tlsCfg, err := routerClientTLS(c, "router", stderr)
			if err != nil {
				return err
			}
			hc := &http.Client{Timeout: 30 * time.Second}
			if tlsCfg != nil {
				tr := http.DefaultTransport.(*http.Transport).Clone()
				tr.TLSClientConfig = tlsCfg
				hc.Transport = tr
			}
			rc := routerClient{base: base, key: key, hc: hc}
			name, verb := c.String("engine"), "cordon"
			if c.Bool("uncordon") {
				verb = "uncordon"
			}
			var es live.EngineState
			if err := rc.do(ctx, http.MethodPost, "/engines/"+url.PathEscape(name)+"/"+verb, &es); err != nil {
				var ae *api.Error
				if errors.As(err, &ae) && ae.Code == "no_engine" {
					return usageError{fmt.Errorf("--engine %q: the router has no such engine (GET %s/state lists them)", name, base)}
				}
				return fmt.Errorf("cordon: %s %s: %s", verb, name, routerErr(err))
			}
			out := c.Root().Writer
			if verb == "uncordon" {
				fmt.Fprintf(out, "%s uncordoned: %s\n", name, serviceNote(es))
				return nil
			}
			fmt.Fprintf(out, "%s cordoned: %d prefill and %d decode legs on it finish there, %d decode legs elsewhere are still to take their KV from it; no new ones\n",
				name, es.PrefillLegs, es.DecodeLegs, es.HandoffsPending)
			if wait == 0 {
				return nil
			}
			start := time.Now()
			deadline := start.Add(wait)
			last := es.PrefillLegs + es.DecodeLegs + es.HandoffsPending
			for {
				if last == 0 {
					fmt.Fprintf(out, "%s drained in %s\n", name, time.Since(start).Round(100*time.Millisecond))
					return nil
				}
				if !time.Now().Before(deadline) {
					return fmt.Errorf("cordon: %s still holds %d legs after --wait %s (it stays cordoned)", name, last, wait)
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("cordon: %d legs still on %s (it stays cordoned): %w", last, name, ctx.Err())
				case <-time.After(min(500*time.Millisecond, time.Until(deadline))):
				}
				var st live.State
				if err := rc.do(ctx, http.MethodGet, "/state", &st); err != nil {
					if ctx.Err() != nil {
						return fmt.Errorf("cordon: %d legs still on %s (it stays cordoned): %w", last, name, ctx.Err())
					}
					return fmt.Errorf("cordon: reading the router's state: %w", err)
				}
				n := -1
				for _, e := range st.Engines {
					if e.Name == name {
						n = e.PrefillLegs + e.DecodeLegs + e.HandoffsPending
						if !e.Cordoned {
							return fmt.Errorf("cordon: %s was uncordoned while waiting", name)
						}
					}
				}
				if n < 0 {
					return fmt.Errorf("cordon: the router's state has no engine %s", name)
				}
				if n != last {
					fmt.Fprintf(out, "%s: %d legs left\n", name, n)
				}
				last = n
			}
		},
	}
}

func serviceNote(es live.EngineState) string {
	if es.Down {
		return "it is ejected, and takes placements again once it answers"
	}
	return "it takes placements again"
}

// routerClient calls a running router's operator routes.
type routerClient struct {
	base, key string
	hc        *http.Client
}

// do sends one request and decodes a 200's JSON into v; another status
// comes back as the router's *api.Error.
func (rc routerClient) do(ctx context.Context, method, path string, v any) error {
	q, err := http.NewRequestWithContext(ctx, method, rc.base+path, nil)
	if err != nil {
		return err
	}
	if rc.key != "" {
		q.Header.Set("Authorization", "Bearer "+rc.key)
	}
	resp, err := rc.hc.Do(q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if resp.StatusCode != http.StatusOK {
		if e := api.ParseError(resp.StatusCode, b); e != nil {
			return e
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s %s: unreadable answer: %v", method, path, err)
	}
	return nil
}

// routerErr says a router's error answer by its code (last_in_role, ...)
// rather than its type, and names the key flag on a 401 or 403.
func routerErr(err error) string {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return err.Error()
	}
	what := ae.Type
	if ae.Code != "" {
		what = ae.Code
	}
	msg := fmt.Sprintf("%d %s: %s", ae.Status, what, ae.Message)
	if ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden {
		msg += " (an admin tenant's key: --api-key-env VAR)"
	}
	return msg
}
