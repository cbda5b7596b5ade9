package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// checkCommand is `narwhal-bench check --fleet FILE [--probe]`: validate a
// fleet file offline (every error listed, exit 2), and with --probe check
// it against the running engines: each reachable, serving the model, and
// each prefill->decode pair able to hand off KV, read back from the
// decode engine's NIXL metrics where it has them (docs/operations.md).
func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate a fleet file (every error listed); with --probe, check its engines and every prefill->decode KV handoff",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "fleet", Required: true, Usage: "fleet YAML file (or built-in name) whose instances.list[].url name the engines"},
			&cli.BoolFlag{Name: "probe", Usage: "also check the engines online: /health, /v1/models, one small two-leg request per prefill->decode pair (the KV transfer read back from the decode engine's NIXL metrics), and each engine's NIXL side channel"},
			&cli.StringFlag{Name: "model", Usage: "the model every engine must serve (default: the first engine's first model)"},
			&cli.IntFlag{Name: "base-port", Usage: "engines at 127.0.0.1:P+i instead of the fleet file's urls"},
			&cli.StringFlag{Name: "timeout", Value: "30s", Usage: "bound on each probe request"},
			&cli.StringFlag{Name: "pairs", Value: "all", Usage: "with --probe, the prefill->decode pairs to probe: all (every ordered pair) or ring (each engine to the next and the previous: 2 per engine, for large fleets)"},
			&cli.IntFlag{Name: "parallel", Value: 32, Usage: "with --probe, pairs probed at once at most (each engine still prefills for one pair and decodes for one at a time)"},
		}, engineFlags()...),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("check: unexpected argument %q: every input is a flag", c.Args().First())}
			}
			opt := probeOptions{pairs: c.String("pairs"), parallel: int(c.Int("parallel"))}
			for _, f := range []string{"pairs", "parallel"} {
				if c.IsSet(f) && !c.Bool("probe") {
					return usageError{fmt.Errorf("--%s: only with --probe", f)}
				}
			}
			if opt.pairs != "all" && opt.pairs != "ring" {
				return usageError{fmt.Errorf("--pairs %q: expected all or ring", opt.pairs)}
			}
			if opt.parallel < 1 {
				return usageError{fmt.Errorf("--parallel %d: expected at least 1", opt.parallel)}
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
			failed := probeFleet(ctx, out, spec.Names(), urls, c.String("model"), timeout, min(timeout, kvWait), opt, tr)
			if failed > 0 {
				return fmt.Errorf("check: %d probe(s) failed", failed)
			}
			return nil
		},
	}
}

// kvWait bounds the wait for a decode engine's NIXL metrics to count a
// probe's KV transfer (vLLM publishes it with a later engine step).
const kvWait = 5 * time.Second

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

// probeFleet checks each engine and each ordered pair; it prints its
// tables and returns how many checks failed. kvWait bounds the wait for
// a decode engine's NIXL metrics to show a pair's transfer.
func probeFleet(ctx context.Context, out io.Writer, names, urls []string, model string, timeout, kvWait time.Duration, opt probeOptions, tr http.RoundTripper) int {
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
				if !slices.Contains(ids, model) {
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
	results := probePairs(ctx, client, names, urls, live, model, kvWait, opt)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "prefill -> decode\tside channel\tKV moved\ttokens\ttime\tverdict")
	handoffs := make([]*handoff, len(urls)) // each engine's first, as prefill
	var unverified []string
	var nOK, nFail, nSkip int
	for _, r := range results {
		pair := names[r.a] + " -> " + names[r.b]
		if r.skipped {
			nSkip++
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tSKIP (an engine failed above)\n", pair)
			continue
		}
		if r.h != nil && handoffs[r.a] == nil {
			handoffs[r.a] = r.h
		}
		if r.unverified && !slices.Contains(unverified, names[r.b]) {
			unverified = append(unverified, names[r.b])
		}
		if strings.HasPrefix(r.verdict, "FAIL") {
			nFail++
		} else {
			nOK++
		}
		hand := "-"
		if r.h != nil {
			hand = r.h.channel()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", pair, hand, r.moved, r.tokens, r.took.Round(time.Millisecond), r.verdict)
	}
	tw.Flush()
	failed += nFail
	fmt.Fprintf(out, "pairs: %d probed (%s), %d ok, %d failed, %d skipped\n", nOK+nFail, opt.pairs, nOK, nFail, nSkip)
	slowLinks(out, names, results)
	if len(unverified) > 0 {
		fmt.Fprintf(out, "KV moved ?: no vllm:nixl_ metrics on %s (vLLM has them only with a KV connector configured), so a decode leg there that recomputed the prompt cannot be told from one that pulled its KV\n", strings.Join(unverified, ", "))
	}
	failed += sideChannels(out, names, urls, handoffs)
	return failed
}

// probeOptions are check --probe's choices of pairs and concurrency.
type probeOptions struct {
	pairs    string // "all" (every ordered pair) or "ring" (each engine to the next and the previous)
	parallel int    // pairs probed at once at most
}

// pairResult is one prefill->decode probe.
type pairResult struct {
	a, b       int
	skipped    bool // an engine of the pair failed its own checks
	h          *handoff
	tokens     int
	took       time.Duration
	moved      string
	verdict    string
	unverified bool    // the decode engine has no NIXL metrics
	rate       float64 // the KV transfer's bytes a second, as the decode engine timed it (0: unknown)
}

// probePairs probes the pairs in rounds: round k pairs engine i with
// engine i+k (mod n), so within a round each engine prefills for one
// pair and decodes for one, and a decode engine's NIXL counts change for
// its one pair alone. Up to opt.parallel pairs of a round run at once.
// The results come back in (prefill, decode) order.
func probePairs(ctx context.Context, client *http.Client, names, urls []string, live []bool, model string, kvWait time.Duration, opt probeOptions) []pairResult {
	var results []pairResult
	for _, pairs := range pairRounds(len(urls), opt.pairs == "ring") {
		round := make([]pairResult, 0, len(pairs))
		for _, p := range pairs {
			round = append(round, pairResult{a: p[0], b: p[1]})
		}
		sem := make(chan struct{}, max(opt.parallel, 1))
		var wg sync.WaitGroup
		for i := range round {
			r := &round[i]
			if !live[r.a] || !live[r.b] {
				r.skipped = true
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				probePair(ctx, client, names, urls, model, kvWait, r)
			}()
		}
		wg.Wait()
		results = append(results, round...)
	}
	sort.Slice(results, func(i, j int) bool {
		if results[i].a != results[j].a {
			return results[i].a < results[j].a
		}
		return results[i].b < results[j].b
	})
	return results
}

// pairRounds lists the ordered pairs of n engines in rounds: round k
// holds (i, i+k mod n) for every i, so each engine is the prefill of one
// pair and the decode of one per round. All rounds give every ordered
// pair once; ring keeps the rounds k = 1 and n-1 (each engine to the next
// and the previous).
func pairRounds(n int, ring bool) [][][2]int {
	var rounds [][][2]int
	for k := 1; k < n; k++ {
		if ring && k != 1 && k != n-1 {
			continue
		}
		round := make([][2]int, 0, n)
		for a := range n {
			round = append(round, [2]int{a, (a + k) % n})
		}
		rounds = append(rounds, round)
	}
	return rounds
}

// probePair runs one pair's two legs and reads the decode engine's NIXL
// counts around them.
func probePair(ctx context.Context, client *http.Client, names, urls []string, model string, kvWait time.Duration, r *pairResult) {
	start := time.Now()
	before, metered, readErr := nixlCounts(ctx, client, urls[r.b], kvWait)
	h, tokens, sent, err := handoffProbe(ctx, client, urls[r.a], urls[r.b], model, names[r.a]+" -> "+names[r.b])
	r.h, r.tokens, r.took = h, tokens, time.Since(start)
	r.moved = "-"
	var note string
	switch {
	case !sent:
	case readErr != nil:
		r.moved, note = "?", fmt.Sprintf(" (KV transfer not verified: the decode engine's /metrics: %v)", readErr)
	case metered:
		r.moved, note, r.rate = nixlVerdict(ctx, client, urls[r.b], before, kvWait, h, err)
	default:
		r.moved = "?"
		r.unverified = err == nil
	}
	switch {
	case err != nil:
		r.verdict = "FAIL " + err.Error() + note
	case strings.HasPrefix(note, "FAIL"):
		r.verdict = note
	default:
		r.verdict = "ok" + note
	}
}

// slowLinks says which pairs moved their KV at under a quarter of the
// median rate of the pairs the decode engines timed (three at least): a
// link far slower than the others, as when UCX falls back to TCP between
// two hosts. A note, not a failure: the pair works.
func slowLinks(out io.Writer, names []string, results []pairResult) {
	var rates []float64
	for _, r := range results {
		if r.rate > 0 {
			rates = append(rates, r.rate)
		}
	}
	if len(rates) < 3 {
		return
	}
	sort.Float64s(rates)
	median := rates[len(rates)/2]
	if len(rates)%2 == 0 {
		median = (rates[len(rates)/2-1] + rates[len(rates)/2]) / 2
	}
	var slow []string
	for _, r := range results {
		if r.rate > 0 && r.rate < median/4 {
			slow = append(slow, fmt.Sprintf("%s -> %s %s", names[r.a], names[r.b], byteRate(r.rate)))
		}
	}
	if len(slow) > 0 {
		fmt.Fprintf(out, "slow KV links: %s, under a quarter of the median %s over %d pairs (the decode engine's vllm:nixl_xfer_time_seconds): UCX may have fallen back to TCP between these engines (UCX_TLS, UCX_NET_DEVICES; ucx_info -d on both hosts)\n",
			strings.Join(slow, ", "), byteRate(median), len(rates))
	}
}

func byteRate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.2f GB/s", bps/1e9)
	}
	return fmt.Sprintf("%.1f MB/s", bps/1e6)
}

// handoff is what a prefill leg's kv_transfer_params name: the engine's
// NIXL side channel and engine id.
type handoff struct {
	params   json.RawMessage
	host     string
	port     int
	engineID string
}

func (h *handoff) channel() string {
	if h.host == "" && h.port == 0 {
		return "-"
	}
	return net.JoinHostPort(h.host, strconv.Itoa(h.port))
}

// Names of the NIXL connector's metrics on the engine that pulls
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py).
const (
	nixlTransfers = "vllm:nixl_xfer_time_seconds_count"
	nixlTime      = "vllm:nixl_xfer_time_seconds_sum"
	nixlBytes     = "vllm:nixl_bytes_transferred_sum"
	nixlFailed    = "vllm:nixl_num_failed_transfers_total"
)

type nixlCount struct{ transfers, seconds, bytes, failed float64 }

// nixlCounts reads an engine's NIXL transfer counts, bounded by limit.
// ok is false when the engine exports none; err says its /metrics could
// not be read.
func nixlCounts(ctx context.Context, client *http.Client, u string, limit time.Duration) (nixlCount, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	b, status, err := engineCall(ctx, client, http.MethodGet, u+"/metrics", nil)
	switch {
	case err != nil && status == 0:
		return nixlCount{}, false, checkUnreachable(err)
	case status == http.StatusNotFound:
		return nixlCount{}, false, nil // no metrics at all: not verifiable
	case status != http.StatusOK:
		return nixlCount{}, false, fmt.Errorf("answered %d", status)
	case err != nil:
		return nixlCount{}, false, err
	}
	m := api.MetricSums(string(b), nixlTransfers, nixlTime, nixlBytes, nixlFailed)
	n, ok := m[nixlTransfers]
	return nixlCount{transfers: n, seconds: m[nixlTime], bytes: m[nixlBytes], failed: m[nixlFailed]}, ok, nil
}

// nixlVerdict waits up to wait for the decode engine's NIXL metrics to
// count the pair's transfer, or its failure (vLLM publishes a transfer's
// stats with a later engine step), and says what moved. With a decode
// leg that failed (legErr) it waits as well, so that a failure counted
// late is not charged to the engine's next pair, and returns only a note
// to add to the leg's error. A transfer counted wins over a failure
// counted in the same wait (the failure is said).
func nixlVerdict(ctx context.Context, client *http.Client, u string, before nixlCount, wait time.Duration, h *handoff, legErr error) (moved, note string, rate float64) {
	deadline := time.Now().Add(wait)
	read := false
	var lastErr error
	for {
		now, ok, err := nixlCounts(ctx, client, u, max(time.Until(deadline), 100*time.Millisecond))
		if err != nil {
			lastErr = err
		} else if ok {
			read = true
			moved, failed := now.transfers > before.transfers, now.failed > before.failed
			switch {
			case moved && legErr != nil:
				return "yes", " (the decode engine did count a KV transfer)", 0
			case moved:
				size := "yes"
				db, dt := now.bytes-before.bytes, now.seconds-before.seconds
				if db > 0 {
					size = "yes, " + byteSize(db)
					if dt > 0 {
						size += fmt.Sprintf(" in %s", time.Duration(dt*float64(time.Second)).Round(10*time.Microsecond))
						rate = db / dt
					}
				}
				if failed {
					return size, " (the decode engine also counted a failed transfer meanwhile)", rate
				}
				return size, "", rate
			case failed && legErr != nil:
				return "failed", fmt.Sprintf(" (the decode engine counted a failed KV transfer from side channel %s)", h.channel()), 0
			case failed:
				return "failed", fmt.Sprintf("FAIL the KV transfer from side channel %s failed and the decode engine recomputed the prompt (kv_load_failure_policy recompute): the prefill engine's VLLM_NIXL_SIDE_CHANNEL_HOST and _PORT must be reachable from the decode engine's host", h.channel()), 0
			}
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	switch {
	case !read:
		return "?", fmt.Sprintf(" (KV transfer not verified: the decode engine's /metrics: %v)", lastErr), 0
	case legErr != nil:
		return "no", "", 0
	}
	return "no", fmt.Sprintf("FAIL the decode engine counted no KV transfer in %s (%s did not rise) and answered anyway: it computed the prompt itself. Its log says why: most often the NIXL handshake with side channel %s failed (unreachable, or an engine id or configuration mismatch), which some vLLM releases do not count as a failed transfer", wait, nixlTransfers, h.channel()), 0
}

func byteSize(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// sideChannels prints the NIXL side channel and engine id each engine's
// handoffs name, and flags what keeps a decode engine from pulling: two
// engines naming the same side channel or engine id, and a loopback side
// channel on an engine other engines reach from another host. It returns
// how many engines it flagged.
func sideChannels(out io.Writer, names, urls []string, hs []*handoff) int {
	seen := false
	for _, h := range hs {
		seen = seen || h != nil
	}
	if !seen {
		return 0
	}
	hosts := make([]string, len(urls))
	for i, u := range urls {
		if pu, err := url.Parse(u); err == nil {
			hosts[i] = pu.Hostname()
		}
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "engine\tside channel\tengine id\tverdict")
	flagged := 0
	for i, h := range hs {
		if h == nil {
			continue
		}
		var why []string
		for j := range hs {
			if j == i || hs[j] == nil {
				continue
			}
			if h.channel() != "-" && hs[j].channel() == h.channel() {
				why = append(why, fmt.Sprintf("the same side channel as %s: each engine needs its own (VLLM_NIXL_SIDE_CHANNEL_PORT per engine on one host, VLLM_NIXL_SIDE_CHANNEL_HOST set to the engine's address on each host)", names[j]))
			}
			if h.engineID != "" && hs[j].engineID == h.engineID {
				why = append(why, fmt.Sprintf("the same NIXL engine id as %s: leave engine_id out of --kv-transfer-config (vLLM draws one per engine) or give each its own", names[j]))
			}
		}
		if loopback(h.host) {
			var away []string
			for j := range urls {
				if j != i && !sameHost(hosts[i], hosts[j]) {
					away = append(away, names[j])
				}
			}
			if len(away) > 0 {
				verb := "pull"
				if len(away) == 1 {
					verb = "pulls"
				}
				why = append(why, fmt.Sprintf("a side channel on %s, which reaches only the engine's own host, while %s %s from another host: set VLLM_NIXL_SIDE_CHANNEL_HOST to an address of %s they can reach", h.host, strings.Join(away, ", "), verb, names[i]))
			}
		}
		verdict := "ok"
		if len(why) > 0 {
			verdict = "FAIL " + strings.Join(why, "; ")
			flagged++
		}
		id := h.engineID
		if id == "" {
			id = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", names[i], h.channel(), id, verdict)
	}
	tw.Flush()
	return flagged
}

// loopback says whether a side-channel host reaches only its own machine
// from elsewhere: a loopback name or address, or the unspecified address
// (VLLM_NIXL_SIDE_CHANNEL_HOST=0.0.0.0: the engine listens on every
// interface but advertises 0.0.0.0, which a decode engine dials as
// itself).
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// sameHost compares two url hosts, every loopback name being one host.
func sameHost(a, b string) bool {
	return a == b || loopback(a) && loopback(b)
}

func getOK(ctx context.Context, client *http.Client, u string, into any) error {
	b, status, err := engineCall(ctx, client, http.MethodGet, u, nil)
	if err != nil {
		return checkUnreachable(err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("answered %d", status)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			return fmt.Errorf("unreadable answer: %v", err)
		}
	}
	return nil
}

// probeFiller makes the probe's prompt a few KV blocks long (vLLM's are
// 16 tokens), so that there are whole blocks to move.
const probeFiller = "The quick brown fox jumps over the lazy dog while the router moves this prompt's KV from one engine to another. "

// handoffProbe runs the router's two legs once: a prefill leg on pu
// (max_tokens 1, do_remote_decode) whose handoff a decode leg on du
// consumes (max_tokens 2). The prompt starts with the pair's name and a
// fresh number, so no prefix cache holds any of it and the decode engine
// has the whole prompt to pull. It returns the handoff (nil when the
// prefill leg gave none), the decode's output tokens, and whether the
// decode leg was sent.
func handoffProbe(ctx context.Context, client *http.Client, pu, du, model, pair string) (*handoff, int, bool, error) {
	raw := map[string]json.RawMessage{}
	mj, _ := json.Marshal(model)
	raw["model"] = mj
	prompt := fmt.Sprintf("narwhal-bench check %s %d. %s%s%s", pair, time.Now().UnixNano(), probeFiller, probeFiller, probeFiller)
	pj, _ := json.Marshal(prompt)
	raw["prompt"] = pj
	raw["max_tokens"] = json.RawMessage(`2`)
	raw["temperature"] = json.RawMessage(`0`)
	body, err := api.PrefillBody(raw)
	if err != nil {
		return nil, 0, false, err
	}
	rb, err := postJSON(ctx, client, pu+"/v1/completions", body)
	if err != nil {
		return nil, 0, false, fmt.Errorf("prefill leg: %v", err)
	}
	params := api.Handoff(rb)
	if params == nil {
		return nil, 0, false, errors.New("the prefill leg returned no kv_transfer_params (is the engine running the NIXL connector?)")
	}
	h := &handoff{params: params}
	var kv api.KVTransferParams
	if json.Unmarshal(params, &kv) == nil {
		if kv.RemoteHost != nil {
			h.host = *kv.RemoteHost
		}
		if kv.RemotePort != nil {
			h.port = *kv.RemotePort
		}
		if kv.RemoteEngineID != nil {
			h.engineID = *kv.RemoteEngineID
		}
	}
	if !kv.CanPull() {
		return h, 0, false, errors.New("the prefill leg's kv_transfer_params lack remote_engine_id, remote_request_id, remote_host or remote_port: a decode engine would recompute the prompt")
	}
	db, err := api.DecodeBody(raw, params)
	if err != nil {
		return h, 0, false, err
	}
	rb, err = postJSON(ctx, client, du+"/v1/completions", db)
	if err != nil {
		return h, 0, true, fmt.Errorf("decode leg: %v", err)
	}
	var v struct {
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(rb, &v) != nil || v.Usage == nil || v.Usage.CompletionTokens < 1 {
		return h, 0, true, errors.New("the decode leg accepted the handoff and produced no tokens")
	}
	return h, v.Usage.CompletionTokens, true, nil
}

func postJSON(ctx context.Context, client *http.Client, u string, body []byte) ([]byte, error) {
	b, status, err := engineCall(ctx, client, http.MethodPost, u, body)
	if err != nil {
		return nil, checkUnreachable(err)
	}
	if status != http.StatusOK {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return nil, fmt.Errorf("answered %d: %s", status, msg)
	}
	return b, nil
}

// checkUnreachable is check's word for a request that got no answer.
func checkUnreachable(err error) error {
	if u := errors.Unwrap(err); u != nil {
		err = u
	}
	return fmt.Errorf("unreachable: %v", err)
}
