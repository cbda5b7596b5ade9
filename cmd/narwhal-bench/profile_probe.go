package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// engineProbe measures one engine.
type engineProbe struct {
	pc       *profileRun
	name     string
	base     string // no trailing slash
	model    string
	maxLen   int  // the engine's context in tokens, 0 when unknown
	estimate bool // no /tokenize: prompts sized by the estimate
	// nonce and seq make every prompt of this command its own (see
	// sized).
	nonce    string
	seq      int
	progress io.Writer
	// lens are the prefill sweep's lengths for this engine (--prefill-lens,
	// the default's trimmed to its context).
	lens []int
	// perEventSaid: the warning that streams carry no usage per chunk is
	// given (once an engine).
	perEventSaid bool
}

// preflight checks the engine before anything is measured: /health 200,
// the model it serves and its context, the sweep's prompts within that
// context (bad input, exit 2, when not), idle (vLLM's /metrics), and
// whether it has POST /tokenize.
func (p *engineProbe) preflight(ctx context.Context, ep *engineProfile) error {
	p.nonce = fmt.Sprintf("%08x", rand.Uint32())
	if err := p.get(ctx, "/health", nil); err != nil {
		return fmt.Errorf("GET /health: %w", err)
	}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/v1/models", &models); err != nil {
		return fmt.Errorf("GET /v1/models: %w", err)
	}
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
		if p.model == "" && (p.pc.model == "" || m.ID == p.pc.model) {
			p.model, p.maxLen = m.ID, m.MaxModelLen
		}
	}
	if p.model == "" {
		if p.pc.model != "" {
			return fmt.Errorf("serves [%s], not --model %s", strings.Join(ids, ", "), p.pc.model)
		}
		return errors.New("GET /v1/models lists no model")
	}
	ep.Model = p.model
	if err := p.checkTokenize(ctx); err != nil {
		return err
	}
	ep.Tokens = "tokenize"
	if p.estimate {
		ep.Tokens = "estimate"
	}
	ep.MaxModelLen = p.maxLen
	p.lens = p.pc.prefillLens
	if p.maxLen > 0 && !p.pc.lensSet {
		// The default lengths, trimmed to the engine's context (an
		// engine served with --max-model-len 4096, 8192 or 16384 is
		// common), as long as three remain.
		var fit []int
		for _, n := range p.lens {
			if n+1 <= p.maxLen {
				fit = append(fit, n)
			}
		}
		if len(fit) >= 3 && len(fit) < len(p.lens) {
			ep.Warnings = append(ep.Warnings, fmt.Sprintf("prefill lengths over the engine's context (%d tokens) left out: sweeping %s (--prefill-lens to choose)", p.maxLen, joinInts(fit)))
			p.lens = fit
		}
	}
	if p.maxLen > 0 {
		// A prefill answers one token, which must fit too.
		if n := p.lens[len(p.lens)-1]; n+1 > p.maxLen {
			return usageError{fmt.Errorf("--prefill-lens: %d tokens: engine %s's context is %d tokens (max_model_len): expected lengths of at most %d", n, p.name, p.maxLen, p.maxLen-1)}
		}
		if n := p.pc.decodePrompt + p.pc.decodeToks; n > p.maxLen {
			return usageError{fmt.Errorf("--decode-prompt %d with --decode-tokens %d: %d tokens: engine %s's context is %d tokens (max_model_len): expected at most that", p.pc.decodePrompt, p.pc.decodeToks, n, p.name, p.maxLen)}
		}
	}
	return p.checkIdle(ctx, ep)
}

// checkIdle refuses an engine with requests running or waiting (unless
// --force): its times would include other work.
func (p *engineProbe) checkIdle(ctx context.Context, ep *engineProfile) error {
	running, waiting, err := p.load(ctx)
	if err != nil {
		ep.Warnings = append(ep.Warnings, fmt.Sprintf("could not tell whether the engine was idle (GET /metrics: %v)", err))
		return nil
	}
	if running == 0 && waiting == 0 {
		return nil
	}
	ep.Busy = &busyState{Running: running, Waiting: waiting}
	if !p.pc.force {
		return fmt.Errorf("busy: %g requests running, %g waiting (vLLM's /metrics): its times would include that work: wait until it is idle (take it out of the router), or pass --force to measure it anyway", running, waiting)
	}
	ep.Warnings = appendOnce(ep.Warnings, fmt.Sprintf("measured busy (--force): %g requests running, %g waiting before the sweep; the fit includes that work", running, waiting))
	return nil
}

func appendOnce(xs []string, x string) []string {
	for _, y := range xs {
		if y == x {
			return xs
		}
	}
	return append(xs, x)
}

// load reads vllm:num_requests_running and vllm:num_requests_waiting
// from the engine's Prometheus text (summed over their label sets).
func (p *engineProbe) load(ctx context.Context) (running, waiting float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	body, status, err := p.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	if status != http.StatusOK {
		return 0, 0, fmt.Errorf("answered %d", status)
	}
	sums := api.MetricSums(string(body), "vllm:num_requests_running", "vllm:num_requests_waiting")
	running, seenR := sums["vllm:num_requests_running"]
	waiting, seenW := sums["vllm:num_requests_waiting"]
	if !seenR || !seenW {
		return 0, 0, errors.New("no vllm:num_requests_running and vllm:num_requests_waiting")
	}
	return running, waiting, nil
}

// checkTokenize asks POST /tokenize once: a 404 means the engine has none
// (the prompts are then sized by the estimate, and the output says so);
// any other failure is the engine's.
func (p *engineProbe) checkTokenize(ctx context.Context) error {
	_, status, err := p.tokenize(ctx, "narwhal-bench profile")
	switch {
	case status == http.StatusNotFound:
		p.estimate = true
		return nil
	case err != nil:
		return fmt.Errorf("POST /tokenize: %w", err)
	}
	return nil
}

// tokenize is POST /tokenize's count of text (and the engine's context,
// which it learns when /v1/models did not say it).
func (p *engineProbe) tokenize(ctx context.Context, text string) (int, int, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	b, _ := json.Marshal(map[string]any{"model": p.model, "prompt": text})
	body, status, err := p.do(ctx, http.MethodPost, "/tokenize", b)
	if err != nil {
		return 0, 0, err
	}
	if status != http.StatusOK {
		return 0, status, fmt.Errorf("answered %d: %s", status, errorText(status, body))
	}
	var out struct {
		Count       *int `json:"count"`
		MaxModelLen int  `json:"max_model_len"`
	}
	if json.Unmarshal(body, &out) != nil || out.Count == nil || *out.Count < 1 {
		return 0, status, fmt.Errorf("answered no token count: %.200s", body)
	}
	if p.maxLen == 0 && out.MaxModelLen > 0 {
		p.maxLen = out.MaxModelLen
	}
	return *out.Count, status, nil
}

// count is the prompt's length in tokens: the engine's count, or the
// estimate when it has no /tokenize.
func (p *engineProbe) count(ctx context.Context, text string) (int, error) {
	if p.estimate {
		return max(1, int(math.Round(float64(len(text))/api.CharsPerToken))), nil
	}
	n, _, err := p.tokenize(ctx, text)
	if err != nil {
		return 0, fmt.Errorf("POST /tokenize: %w", err)
	}
	return n, nil
}

// filler is the prompts' body: one common word, about a token each in
// most tokenizers.
const filler = "token "

// sized returns a prompt of about target tokens and its count. Every
// prompt starts with a tag of its own (this command's random nonce and a
// sequence number): vLLM caches prefixes by default, hashing the prompt
// in blocks chained from its first token, so a prompt that began as an
// earlier one did (an earlier repeat, or a run of this command before)
// would be served partly from the cache and its time would not be a
// prefill's. Text of target filler words is counted once; when the count
// is off, the text is cut (or grown) to len·target/count characters and
// counted again, and that count is the sample's.
func (p *engineProbe) sized(ctx context.Context, target int) (string, int, error) {
	p.seq++
	tag := fmt.Sprintf("%s-%d: ", p.nonce, p.seq)
	text := tag + strings.Repeat(filler, target)
	if p.estimate {
		text = fillTo(tag, int(float64(target)*api.CharsPerToken))
	}
	n, err := p.count(ctx, text)
	if err != nil || n == target {
		return text, n, err
	}
	text = fillTo(tag, max(len(tag)+1, int(float64(len(text))*float64(target)/float64(n))))
	n, err = p.count(ctx, text)
	return text, n, err
}

// fillTo is tag followed by filler words, chars bytes in all.
func fillTo(tag string, chars int) string {
	var b strings.Builder
	b.WriteString(tag)
	for b.Len() < chars {
		b.WriteString(filler)
	}
	return b.String()[:max(chars, len(tag))]
}

// measure runs the sweeps and fits the profile into ep.
func (p *engineProbe) measure(ctx context.Context, ep *engineProfile) error {
	if err := p.checkIdle(ctx, ep); err != nil {
		return err
	}
	// A real engine's first requests can pay one-time costs: one short
	// request first, unmeasured.
	p.say("warm-up request")
	if text, _, err := p.sized(ctx, 32); err != nil {
		return err
	} else if _, _, err := p.complete(ctx, text); err != nil {
		return fmt.Errorf("warm-up request: %w", err)
	}
	prefill, medians, err := p.prefillSweep(ctx)
	if err != nil {
		return err
	}
	waves, err := p.decodeSweep(ctx, ep)
	if err != nil {
		return err
	}
	var decode []timing.Sample
	for _, w := range waves {
		decode = append(decode, w.samples...)
	}
	keep := trimOutliers(decode)
	var kept []timing.Sample
	for i, p := range decode {
		if keep[i] {
			kept = append(kept, p)
		}
	}
	fit, err := timing.FitProfile(medians, kept)
	if err != nil {
		if errors.Is(err, timing.ErrDegenerate) && strings.HasPrefix(err.Error(), "decode") {
			return fmt.Errorf("fit: %w: expected gaps at two or more contexts (raise --decode-tokens, or give --decode-concurrency more values)", err)
		}
		return fmt.Errorf("fit: %w", err)
	}
	for _, c := range []*float64{&fit.A, &fit.B, &fit.C, &fit.Slope, &fit.Intercept} {
		*c = roundSig(*c, 4)
	}
	ep.Fit = &fit
	ep.Prefill = prefillReport(prefill, medians, p.lens, fit, ep.Current)
	ep.Decode = decodeReport(waves, keep, fit, ep.Current)
	ep.Warnings = append(ep.Warnings, fitWarnings(fit, ep)...)
	return nil
}

func (p *engineProbe) say(format string, args ...any) {
	fmt.Fprintf(p.progress, "narwhal-bench: profile %s: %s\n", p.name, fmt.Sprintf(format, args...))
}

// prefillSweep times --prefill-repeats prompts of each length, one after
// another, each answering one token: every sample, and each length's
// median (prompt tokens, seconds), which the fit takes so that one
// stalled request does not bend the curve.
func (p *engineProbe) prefillSweep(ctx context.Context) (all, medians []timing.Sample, err error) {
	for _, n := range p.lens {
		p.say("prefill %d tokens x %d", n, p.pc.repeats)
		var xs, ys []float64
		for range p.pc.repeats {
			text, count, err := p.sized(ctx, n)
			if err != nil {
				return nil, nil, err
			}
			secs, usage, err := p.complete(ctx, text)
			if err != nil {
				return nil, nil, fmt.Errorf("prefill of %d tokens: %w", n, err)
			}
			if p.estimate && usage > 0 {
				count = usage // the engine's own count, where it gives one
			}
			all = append(all, timing.Sample{X: float64(count), Y: secs})
			xs, ys = append(xs, float64(count)), append(ys, secs)
		}
		medians = append(medians, timing.Sample{X: median(xs), Y: median(ys)})
	}
	return all, medians, nil
}

// outlierMADs is how many robust standard deviations (1.4826 times the
// median absolute deviation) from a first line fit a decode gap may lie
// before the line is fitted again without it.
const outlierMADs = 4

// trimOutliers marks the decode samples to fit: all but those far from a
// first least-squares line. A gap that a stall on the engine or on this
// machine stretched (or the gap after it, shortened) would tilt the line
// by more than its weight. All are kept when too few would remain to fit
// a line.
func trimOutliers(s []timing.Sample) []bool {
	keep := make([]bool, len(s))
	for i := range keep {
		keep[i] = true
	}
	m, k, err := timing.FitLinear(s)
	if err != nil {
		return keep // FitProfile says why
	}
	res := make([]float64, len(s))
	for i, p := range s {
		res[i] = p.Y - (m*p.X + k)
	}
	mid := median(res)
	dev := make([]float64, len(s))
	for i, r := range res {
		dev[i] = math.Abs(r - mid)
	}
	bound := outlierMADs * 1.4826 * median(dev)
	if bound == 0 {
		return keep
	}
	trimmed := make([]bool, len(s))
	xs := map[float64]bool{}
	for i, p := range s {
		if math.Abs(res[i]-mid) <= bound {
			trimmed[i] = true
			xs[p.X] = true
		}
	}
	if len(xs) < 2 {
		return keep
	}
	return trimmed
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// complete sends one non-streamed completion of text answering one token
// and returns its wall time and the answer's usage.prompt_tokens (0 when
// it has none).
func (p *engineProbe) complete(ctx context.Context, text string) (float64, int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.pc.timeout)
	defer cancel()
	b, _ := json.Marshal(map[string]any{"model": p.model, "prompt": text, "max_tokens": 1, "temperature": 0, "stream": false})
	start := time.Now()
	body, status, err := p.do(ctx, http.MethodPost, "/v1/completions", b)
	secs := time.Since(start).Seconds()
	if err != nil {
		return 0, 0, p.timedOut(ctx, err)
	}
	if status != http.StatusOK {
		return 0, 0, fmt.Errorf("POST /v1/completions answered %d: %s", status, errorText(status, body))
	}
	var out struct {
		Usage *struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	usage := 0
	if json.Unmarshal(body, &out) == nil && out.Usage != nil {
		usage = out.Usage.PromptTokens
	}
	return secs, usage, nil
}

// wave is one decode concurrency's streams and the gap samples taken from
// them.
type wave struct {
	conc    int
	streams []streamTrace
	samples []timing.Sample
}

// streamTrace is what one decode stream did, on the client's clock.
type streamTrace struct {
	prompt int         // its prompt tokens
	start  time.Time   // sent
	tokens []time.Time // each event's arrival that brought tokens
	// counts is the stream's tokens so far at each of tokens, as the
	// engine's usage says (stream_options.continuous_usage_stats); nil
	// when it says none: one token an event.
	counts []int
	end    time.Time // the stream ended
	err    error
}

// count is the stream's tokens as of its k-th event (0-based).
func (s *streamTrace) count(k int) int {
	if s.counts == nil {
		return k + 1
	}
	return s.counts[k]
}

// total is the stream's tokens.
func (s *streamTrace) total() int {
	if len(s.tokens) == 0 {
		return 0
	}
	return s.count(len(s.tokens) - 1)
}

// decodeSweep runs one wave of concurrent streams per --decode-concurrency.
func (p *engineProbe) decodeSweep(ctx context.Context, ep *engineProfile) ([]wave, error) {
	var out []wave
	for _, c := range p.pc.conc {
		p.say("decode %d %s x %d tokens", c, plural(c, "stream"), p.pc.decodeToks)
		w := wave{conc: c, streams: make([]streamTrace, c)}
		texts := make([]string, c)
		for i := range texts {
			text, n, err := p.sized(ctx, p.pc.decodePrompt)
			if err != nil {
				return nil, err
			}
			texts[i], w.streams[i].prompt = text, n
		}
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range texts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-ready
				p.stream(ctx, texts[i], &w.streams[i])
			}()
		}
		close(ready) // every stream sent at once
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		short, perEvent := 0, 0
		for i := range w.streams {
			if err := w.streams[i].err; err != nil {
				return nil, fmt.Errorf("decode wave of %d streams: stream %d: %w", c, i, err)
			}
			if w.streams[i].total() < p.pc.decodeToks {
				short++
			}
			if w.streams[i].counts == nil {
				perEvent++
			}
		}
		if perEvent > 0 && !p.perEventSaid {
			p.perEventSaid = true
			ep.Warnings = append(ep.Warnings, "the engine's streams carry no usage per chunk (stream_options.continuous_usage_stats, vLLM's): each streamed event is counted as one token, so a chunk that merged tokens reads as one slow iteration")
		}
		if short > 0 {
			ep.Warnings = append(ep.Warnings, fmt.Sprintf("decode wave of %d streams: %d streams ended before %d tokens (does the engine honour min_tokens and ignore_eos?)", c, short, p.pc.decodeToks))
		}
		w.samples = gapSamples(w.streams)
		out = append(out, w)
	}
	return out, nil
}

// gapSamples turns one wave's streams into decode samples (resident
// context tokens, seconds of one iteration). The streams' events are
// replayed in time order on a resident counter: a stream adds its prompt
// tokens when it is sent and one per token it receives, and takes them
// all away half a gap after its last token. (Its last token's iteration
// held it: the streams that end in the same iteration get their last
// tokens a few microseconds apart, and the first of them to end must not
// leave the counter before the others' last tokens are counted; the next
// iteration's tokens come a whole gap later.) Each gap between two
// tokens of a stream is one iteration's time, sampled with the counter as
// it stands at the later token. A stream's first gap is left out (its own
// first token may have come out of an iteration that also prefilled
// others), and so is every gap that began before each stream of the wave
// had its first token: the iteration it spans may hold another stream's
// prefill, which is not a decode iteration's cost.
func gapSamples(streams []streamTrace) []timing.Sample {
	type ev struct {
		at     time.Time
		kind   int // 0 sent, 1 token, 2 ended
		stream int
		k      int // token index
	}
	var evs []ev
	allFirst := time.Time{}
	for i, s := range streams {
		if len(s.tokens) == 0 {
			return nil // a stream with no token: no iteration is clean
		}
		if s.tokens[0].After(allFirst) {
			allFirst = s.tokens[0]
		}
		gone := s.tokens[len(s.tokens)-1]
		if n := len(s.tokens); n >= 2 {
			gone = gone.Add(s.tokens[n-1].Sub(s.tokens[n-2]) / time.Duration(2*(s.count(n-1)-s.count(n-2))))
		}
		evs = append(evs, ev{at: s.start, kind: 0, stream: i}, ev{at: gone, kind: 2, stream: i})
		for k, t := range s.tokens {
			evs = append(evs, ev{at: t, kind: 1, stream: i, k: k})
		}
	}
	sort.SliceStable(evs, func(a, b int) bool {
		if !evs[a].at.Equal(evs[b].at) {
			return evs[a].at.Before(evs[b].at)
		}
		return evs[a].kind < evs[b].kind
	})
	var resident int64
	var out []timing.Sample
	for _, e := range evs {
		s := &streams[e.stream]
		switch e.kind {
		case 0:
			resident += int64(s.prompt)
		case 2:
			resident -= int64(s.prompt + s.total())
		case 1:
			n := s.count(e.k) // tokens this event brought: one an iteration
			if e.k > 0 {
				n -= s.count(e.k - 1)
			}
			resident += int64(n)
			if e.k < 2 {
				continue // no gap yet, or the stream's first gap
			}
			prev := s.tokens[e.k-1]
			if prev.Before(allFirst) {
				continue
			}
			out = append(out, timing.Sample{X: float64(resident), Y: s.tokens[e.k].Sub(prev).Seconds() / float64(n)})
		}
	}
	return out
}

// stream sends one streamed completion of text that writes exactly
// --decode-tokens tokens and records when each arrives.
func (p *engineProbe) stream(ctx context.Context, text string, tr *streamTrace) {
	ctx, cancel := context.WithTimeout(ctx, p.pc.timeout)
	defer cancel()
	n := p.pc.decodeToks
	// The usage on every chunk (vLLM's continuous_usage_stats) counts the
	// tokens each chunk brings: one whose text is empty (the EOS token
	// ignore_eos lets through, a partial character the detokenizer holds
	// back) still took an iteration, and a server behind on its stream can
	// merge several tokens into one chunk. It also gives the prompt's
	// count where /tokenize is missing.
	b, _ := json.Marshal(map[string]any{"model": p.model, "prompt": text, "max_tokens": n, "min_tokens": n,
		"ignore_eos": true, "temperature": 0, "stream": true,
		"stream_options": map[string]bool{"include_usage": true, "continuous_usage_stats": true}})
	q, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/v1/completions", bytes.NewReader(b))
	if err != nil {
		tr.err = err
		return
	}
	q.Header.Set("Content-Type", "application/json")
	tr.start = time.Now()
	defer func() { tr.end = time.Now() }()
	resp, err := p.pc.client.Do(q)
	if err != nil {
		tr.err = p.timedOut(ctx, unreachable(err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		tr.err = fmt.Errorf("POST /v1/completions answered %d: %s", resp.StatusCode, errorText(resp.StatusCode, body))
		return
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			tr.err = errors.New("a stream event over 64 KiB")
			return
		}
		if payload, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			payload = bytes.TrimSpace(payload)
			if string(payload) == "[DONE]" {
				return
			}
			ch, ok := api.ReadChunk(payload)
			switch {
			case !ok:
				tr.err = fmt.Errorf("unreadable stream event: %.200s", payload)
				return
			case ch.Err != nil:
				tr.err = fmt.Errorf("error event: %.300s", ch.Err)
				return
			default:
				tr.event(time.Now(), payload)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			tr.err = p.timedOut(ctx, fmt.Errorf("reading the stream: %w", err))
			return
		}
	}
}

// event records a stream event that arrived at t: the tokens it brought,
// as its usage counts them, or, without usage, one for a chunk with a
// choice (its text may be empty: it still took an iteration).
func (tr *streamTrace) event(t time.Time, payload []byte) {
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return
	}
	if c.Usage != nil && c.Usage.PromptTokens > 0 {
		tr.prompt = c.Usage.PromptTokens
	}
	switch {
	case c.Usage != nil && len(c.Choices) > 0 && (tr.counts != nil || len(tr.tokens) == 0):
		if c.Usage.CompletionTokens > tr.total() {
			tr.tokens = append(tr.tokens, t)
			tr.counts = append(tr.counts, c.Usage.CompletionTokens)
		}
	case len(c.Choices) > 0:
		if tr.counts != nil {
			// A chunk without usage after some with it: one more token.
			tr.counts = append(tr.counts, tr.total()+1)
		}
		tr.tokens = append(tr.tokens, t)
	}
}

// joinInts writes xs as a comma-separated list.
func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// timedOut names --request-timeout in err when the request's own bound
// (ctx, a child of the command's) ended it.
func (p *engineProbe) timedOut(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer within --request-timeout %s", err, p.pc.timeout)
	}
	return err
}

// get is a GET of path bounded by probeTimeout: 200, its JSON into into
// (when not nil).
func (p *engineProbe) get(ctx context.Context, path string, into any) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	body, status, err := p.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("answered %d: %s", status, errorText(status, body))
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			return fmt.Errorf("unreadable answer: %v", err)
		}
	}
	return nil
}

// do sends one request and reads its whole answer (at most 16 MiB).
func (p *engineProbe) do(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	b, status, err := engineCall(ctx, p.pc.client, method, p.base+path, body)
	if err != nil && status == 0 {
		return nil, 0, unreachable(err)
	}
	return b, status, err
}

// engineCall sends one request to an engine (JSON when body is not nil)
// and reads its answer, at most 16 MiB: the body and status. With no
// answer the error is the client's and the status 0; an answer cut short
// keeps its status.
func engineCall(ctx context.Context, client *http.Client, method, u string, body []byte) ([]byte, int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	q, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, 0, err
	}
	if body != nil {
		q.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(q)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("reading the answer: %w", err)
	}
	return b, resp.StatusCode, nil
}

// unreachable says why a request got no answer (the url.Error's cause).
func unreachable(err error) error {
	if u := errors.Unwrap(err); u != nil {
		err = u
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer in time: %w", err)
	}
	return fmt.Errorf("unreachable: %w", err)
}

// errorText is an error answer's message, short.
func errorText(status int, body []byte) string {
	s := strings.TrimSpace(string(body))
	if e := api.ParseError(status, body); e != nil && e.Message != "" {
		s = e.Message
	}
	if len(s) > 200 {
		s = s[:200]
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		// vLLM started with --api-key guards /v1/*.
		s += " (an engine started with an API key wants it: --engine-api-key-env or --engine-api-key-file)"
	}
	return s
}
