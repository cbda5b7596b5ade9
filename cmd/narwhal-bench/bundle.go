package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/live"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// bundleCommand is `narwhal-bench bundle`: a redacted diagnostic archive
// for a bug report (docs/operations.md, Security).
func bundleCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "bundle",
		Usage: "write a redacted diagnostic archive: config, the router's /state and /metrics, a journal summary, versions",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "out", Required: true, Usage: "the archive to write (.tar.gz)"},
			&cli.StringFlag{Name: "router", Usage: "the router's base URL, to read /state, /metrics and /health"},
			&cli.StringFlag{Name: "api-key-env", Usage: "an admin tenant's key for the router, from this environment variable"},
			&cli.StringFlag{Name: "journal", Usage: "a journal directory to summarize (counts, no text)"},
			&cli.StringSliceFlag{Name: "config", Usage: "a configuration file to include (fleet, tenants), redacted; repeatable"},
			&cli.StringSliceFlag{Name: "redact-env", Usage: "an environment variable whose value must not appear in the archive (tenant and engine keys); repeatable"},
		}, routerClientFlags("--router")...),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("bundle: unexpected argument %q: every input is a flag", c.Args().First())}
			}
			tlsCfg, err := routerClientTLS(c, "router", stderr)
			if err != nil {
				return err
			}
			rd := newRedactor()
			key := ""
			if v := c.String("api-key-env"); v != "" {
				key = os.Getenv(v)
				rd.secret(key)
			}
			for _, v := range c.StringSlice("redact-env") {
				rd.secret(os.Getenv(v))
			}
			files := map[string][]byte{}
			var notes []string
			vers := map[string]string{"narwhal-bench": version, "go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH,
				"written": time.Now().UTC().Format(time.RFC3339)}
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, d := range bi.Deps {
					if strings.HasPrefix(d.Path, "go.etcd.io/etcd/client") || strings.HasPrefix(d.Path, "github.com/cockroachdb/pebble") || strings.HasPrefix(d.Path, "github.com/prometheus/client_golang") {
						vers[d.Path] = d.Version
					}
				}
			}
			files["versions.json"], _ = json.MarshalIndent(vers, "", "  ")
			for _, p := range c.StringSlice("config") {
				// A tenants file names its keys' files and variables:
				// their values are secrets wherever they turn up, a key
				// file given as a --config among them. Each key that reads
				// here is redacted; one that does not is said.
				if keys, missing, err := live.TenantKeysFound(p); err == nil {
					for _, k := range keys {
						rd.secret(string(k))
					}
					for _, m := range missing {
						notes = append(notes, fmt.Sprintf("config %s: %s: its value is redacted only where it has a key's shape", p, m))
					}
				}
			}
			for i, p := range c.StringSlice("config") {
				b, err := os.ReadFile(p)
				if err != nil {
					notes = append(notes, fmt.Sprintf("config %s: %v", p, err))
					continue
				}
				files[fmt.Sprintf("config/%d-%s", i, sanitizeName(p))] = b
			}
			if base := strings.TrimRight(c.String("router"), "/"); base != "" {
				hc := http.Client{Timeout: 10 * time.Second}
				if tlsCfg != nil {
					tr := http.DefaultTransport.(*http.Transport).Clone()
					tr.TLSClientConfig = tlsCfg
					hc.Transport = tr
				}
				for _, route := range []string{"/health", "/state", "/metrics", "/journal"} {
					q, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+route, nil)
					if key != "" {
						q.Header.Set("Authorization", "Bearer "+key)
					}
					resp, err := hc.Do(q)
					if err != nil {
						notes = append(notes, fmt.Sprintf("GET %s: %v", route, err))
						continue
					}
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
					resp.Body.Close()
					if resp.StatusCode != 200 {
						notes = append(notes, fmt.Sprintf("GET %s: %s", route, resp.Status))
						continue
					}
					files["router"+route+".txt"] = b
				}
			}
			if dir := c.String("journal"); dir != "" {
				b, err := journalSummary(dir)
				if err != nil {
					notes = append(notes, fmt.Sprintf("journal %s: %v", dir, err))
				} else {
					files["journal-summary.json"] = b
				}
			}
			files["notes.txt"] = []byte(strings.Join(notes, "\n") + "\n")
			if err := writeBundle(c.String("out"), files, rd); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "narwhal-bench: bundle: %s (%d files, redacted)\n", c.String("out"), len(files))
			return nil
		},
	}
}

func sanitizeName(p string) string {
	return regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(p[strings.LastIndex(p, "/")+1:], "_")
}

// redactor removes secrets from text: the values it was told about, and
// whatever looks like one by shape (bearer tokens, key fields, passwords
// in URLs, sk- keys).
type redactor struct {
	values []string
	shapes []*regexp.Regexp
}

func newRedactor() *redactor {
	return &redactor{shapes: []*regexp.Regexp{
		regexp.MustCompile(`(?i)(bearer\s+)[^\s"',]+`),
		regexp.MustCompile(`(?i)((?:api[_-]?key|token|secret|password|passwd|authorization)["']?\s*[:=]\s*["']?)[^\s"',}]+`),
		// Userinfo in engine URLs (user:password@, a token alone as
		// user@), to the authority's last @: a password may hold an
		// unescaped one, and Go's URL parser splits at the last.
		regexp.MustCompile(`(://)[^/\s"'?#]*(@)`),
		regexp.MustCompile(`()sk-[A-Za-z0-9_-]{8,}()`),
	}}
}

func (r *redactor) secret(v string) {
	if v = strings.TrimSpace(v); len(v) >= 4 {
		r.values = append(r.values, v)
	}
}

func (r *redactor) apply(b []byte) []byte {
	s := string(b)
	for _, v := range r.values {
		s = strings.ReplaceAll(s, v, "[REDACTED]")
	}
	for i, re := range r.shapes {
		if i >= 2 {
			s = re.ReplaceAllString(s, "${1}[REDACTED]${2}")
		} else {
			s = re.ReplaceAllString(s, "${1}[REDACTED]")
		}
	}
	return []byte(s)
}

// journalSummary counts a journal's records by kind and cause and lists
// its last records without any text (no prompt, answer or decision text).
func journalSummary(dir string) ([]byte, error) {
	r, err := journal.OpenWith(dir, journal.OpenOptions{Partial: true})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	type brief struct {
		Seq   uint64  `json:"seq"`
		AtS   float64 `json:"at_s"`
		Kind  string  `json:"kind"`
		Cause string  `json:"cause,omitempty"`
		Inst  int     `json:"inst"`
		Epoch uint64  `json:"epoch,omitempty"`
	}
	kinds, causes := map[string]int{}, map[string]int{}
	var last []brief
	err = r.Replay(func(rec *event.Record) error {
		kinds[rec.Kind.String()]++
		if rec.Cause != event.CauseNone {
			causes[rec.Kind.String()+"/"+rec.Cause.String()]++
		}
		last = append(last, brief{rec.Seq, rec.At.Seconds(), rec.Kind.String(), rec.Cause.String(), int(rec.Inst), rec.Epoch})
		if len(last) > 200 {
			last = last[1:]
		}
		return nil
	})
	m := r.Meta()
	sum := map[string]any{"dir": dir, "arm": m.Arm, "fleet": m.Fleet, "driver": m.Driver, "instances": m.Instances,
		"partial": r.Partial(), "records_by_kind": kinds, "causes": causes, "last_records": last}
	if err != nil {
		sum["replay_error"] = err.Error()
	}
	return json.MarshalIndent(sum, "", "  ")
}

// writeBundle writes files, each redacted, to a gzipped tar at path.
func writeBundle(path string, files map[string][]byte, rd *redactor) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("bundle: --out: %w", err)
	}
	// An existing file keeps its mode on open: the bundle is 0600 anyway.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("bundle: --out: %w", err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	now := time.Now()
	for _, n := range names {
		b := rd.apply(files[n])
		if err := tw.WriteHeader(&tar.Header{Name: "narwhal-bundle/" + n, Mode: 0o600, Size: int64(len(b)), ModTime: now}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}
