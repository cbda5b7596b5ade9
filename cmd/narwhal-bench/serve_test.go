package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/narwhal-bench/narwhal-bench/cmd/internal/simcli"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/report"
)

// TestMain lets a test run this binary's main as a child process: with
// NWB_CHILD_ARGS set, the process is narwhal-bench with those arguments
// (separated by \x1f).
func TestMain(m *testing.M) {
	if args := os.Getenv("NWB_CHILD_ARGS"); args != "" {
		// As main: the first SIGINT or SIGTERM cancels the context.
		ctx, stop := simcli.SignalContext()
		code := run(ctx, append([]string{"narwhal-bench"}, strings.Split(args, "\x1f")...), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// child starts narwhal-bench args as a separate process.
func child(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NWB_CHILD_ARGS="+strings.Join(args, "\x1f"))
	var errb bytes.Buffer
	cmd.Stderr = &lockedWriter{w: &errb}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &errb
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// freePorts finds n consecutive free loopback ports. It looks below
// Linux's ephemeral range (32768-60999), where the many client
// connections of a test run (and their TIME_WAIT) take no ports.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for try := 0; try < 500; try++ {
		base := 20000 + rng.IntN(12000-n)
		var held []net.Listener
		ok := true
		for i := 0; i < n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

func waitHTTP(t *testing.T, url string, who *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never answered: %s", url, who.String())
}

// The stub fleet and the router as separate processes talking HTTP over
// loopback: the OpenAI client's requests go through, SIGTERM stops the
// router cleanly, and its journal exports and reports like a simulation's.
func TestServeAndStubProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	base := freePorts(t, 9)
	dir := t.TempDir()
	jdir := filepath.Join(dir, "journal")
	_, stubErr := child(t, "stub", "--fleet", "demo", "--base-port", fmt.Sprint(base+1), "--time-scale", "0.01")
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", base+8), stubErr)
	serve, serveErr := child(t, "serve", "--fleet", "demo", "--base-port", fmt.Sprint(base+1), "--arm", "arrow",
		"--listen", fmt.Sprintf("127.0.0.1:%d", base), "--journal", jdir, "--model", "stub", "--prefix-cache")
	url := fmt.Sprintf("http://127.0.0.1:%d", base)
	waitHTTP(t, url+"/health", serveErr)

	c := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i%2 == 0 {
				_, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stub",
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(strings.Repeat("token ", 20+i))}, MaxTokens: openai.Int(6)})
				if err != nil {
					errs <- err
				}
				return
			}
			s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "stub",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("word ", 10+i))}, MaxTokens: openai.Int(6)})
			for s.Next() {
			}
			if err := s.Err(); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v: %s", err, serveErr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not stop on SIGTERM: %s", serveErr.String())
	}

	// The journal says the router priced prefix caches.
	jr, err := journal.Open(jdir)
	if err != nil {
		t.Fatal(err)
	}
	if m := jr.Meta(); !m.PrefixCache || m.Driver != "live" {
		t.Errorf("run metadata %+v: expected a live run with prefix_cache", m)
	}
	jr.Close()

	// The live journal is a journal like any other: the export and the
	// report read it with no special case.
	code, out, stderr := runCLI(t, "export", "--out", filepath.Join(dir, "pq"), jdir)
	if code != 0 {
		t.Fatalf("export: exit %d: %s %s", code, out, stderr)
	}
	rep, err := report.Load(jdir, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := rep.Write(&text, report.FormatText); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "arrow") || !strings.Contains(text.String(), "40 (100.0%)") {
		t.Fatalf("report of the live journal:\n%s", text.String())
	}
}

// TestServeStubChatWithoutLimit: a chat client that sends no max_tokens
// (most do) gets the rest of the context from vLLM and from a stub;
// `serve --stub --stub-mean-output N` gives the stubs' answers a natural
// end, and --stub-max-model-len their context, as `stub` does.
func TestServeStubChatWithoutLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	base := freePorts(t, 10)
	url := fmt.Sprintf("http://127.0.0.1:%d", base)
	_, errb := child(t, "serve", "--fleet", "demo", "--stub", "--stub-time-scale", "0", "--stub-mean-output", "8",
		"--stub-max-model-len", "4096", "--base-port", fmt.Sprint(base+1), "--listen", fmt.Sprintf("127.0.0.1:%d", base), "--model", "stub")
	waitHTTP(t, url+"/health", errb)
	for _, body := range []string{`{"model":"stub","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"stub","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`} {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`"completion_tokens":(\d+)`).FindSubmatch(b)
		if resp.StatusCode != 200 || m == nil || !strings.Contains(string(b), `"finish_reason":"stop"`) {
			t.Fatalf("%s: %d %.400s", body, resp.StatusCode, b)
		}
		if n, _ := strconv.Atoi(string(m[1])); n < 1 || n > 16 {
			t.Fatalf("%s: %d tokens, expected 1..16 (mean 8)", body, n)
		}
	}
	// The stubs' context is 4096: a longer answer is refused.
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"stub","messages":[{"role":"user","content":"hi"}],"max_tokens":5000}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "4096") {
		t.Fatalf("max_tokens past --stub-max-model-len: %d %s", resp.StatusCode, b)
	}

	for _, args := range [][]string{{"--stub-mean-output", "8"}, {"--stub", "--stub-mean-output", "-1"}, {"--stub", "--stub-max-model-len", "1"}} {
		code, out, errs := runCLI(t, append([]string{"serve", "--fleet", "demo", "--listen", "127.0.0.1:0", "--base-port", fmt.Sprint(base + 1)}, args...)...)
		if code != 2 || !strings.Contains(errs, "only with --stub") && !strings.Contains(errs, "expected") || strings.Contains(out+errs, "serving") {
			t.Errorf("%v: exit %d, %q %q: expected exit 2", args, code, out, errs)
		}
	}
}

// TestServeDrainDeadline: SIGTERM with a stream and a whole answer still
// running past --drain-timeout: each client is told the router stopped
// (an error event ending the stream, a 503), never cut silently, and the
// journal ends each once, fail unavailable, and is whole.
func TestServeDrainDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	base := freePorts(t, 10)
	url := fmt.Sprintf("http://127.0.0.1:%d", base)
	jdir := filepath.Join(t.TempDir(), "journal")
	serve, errb := child(t, "serve", "--fleet", "demo", "--stub", "--stub-time-scale", "1", "--drain-timeout", "300ms",
		"--base-port", fmt.Sprint(base+1), "--listen", fmt.Sprintf("127.0.0.1:%d", base), "--model", "stub", "--journal", jdir)
	waitHTTP(t, url+"/health", errb)
	const long = `"prompt":"a long answer","max_tokens":3000,"min_tokens":3000`
	streamed, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"stub",`+long+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamed.Body.Read(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	whole := make(chan string, 1)
	go func() {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"stub",`+long+`}`))
		if err != nil {
			whole <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		whole <- fmt.Sprint(resp.StatusCode, " ", string(b))
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := getJSON(url + "/state")
		counts, _ := st["counts"].(map[string]any)
		if n, _ := counts["in_flight"].(float64); n == 2 {
			break // both admitted
		}
		if time.Now().After(deadline) {
			t.Fatalf("never two requests in flight: %v", st)
		}
	}
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(streamed.Body)
	streamed.Body.Close()
	if !strings.Contains(string(rest), "the router stopped before this request's end") {
		t.Errorf("the stream's end: %q: expected an error event saying the router stopped", rest[max(0, len(rest)-300):])
	}
	if got := <-whole; !strings.HasPrefix(got, "503 ") || !strings.Contains(got, "router stopped") {
		t.Errorf("the whole answer: %.300s: expected 503", got)
	}
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve exited with %v: %s", err, errb)
	}
	jr, err := journal.Open(jdir) // whole: a partial journal is refused
	if err != nil {
		t.Fatalf("the journal after the drain deadline: %v", err)
	}
	defer jr.Close()
	var recs []event.Record
	if err := jr.Replay(func(r *event.Record) error { recs = append(recs, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	ends := map[string]int{}
	for _, r := range recs {
		if r.Kind.Terminal() {
			ends[r.Kind.String()+"/"+r.Cause.String()]++
		}
	}
	if ends["fail/unavailable"] != 2 || len(ends) != 1 {
		t.Fatalf("ends %v: expected both requests fail unavailable", ends)
	}
}

// The first SIGINT drains; a second one during the drain kills the
// process at once, as the docs promise (an operator who will not wait).
func TestServeSecondSignalKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	base := freePorts(t, 9)
	url := fmt.Sprintf("http://127.0.0.1:%d", base)
	serve, errs := child(t, "serve", "--fleet", "demo", "--stub", "--base-port", fmt.Sprint(base+1),
		"--listen", url[len("http://"):], "--arm", "static:4P4D", "--drain-timeout", "10m")
	waitHTTP(t, url+"/health", errs)
	// One long answer keeps the drain going.
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stub","prompt":"a long answer","max_tokens":20000,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	serve.Process.Signal(syscall.SIGINT)
	for !strings.Contains(stderrOf(serve), "shutting down") {
		time.Sleep(10 * time.Millisecond)
	}
	serve.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Fatalf("serve after a second SIGINT: %v: expected killed by SIGINT\n%s", err, stderrOf(serve))
		}
	case <-time.After(2 * time.Minute): // a hang guard, not a time asserted
		t.Fatalf("a second SIGINT did not stop serve during its drain:\n%s", stderrOf(serve))
	}
}

// serve --stub --stub-allow-faults lets faults be injected into its stubs
// (POST /stub/faults); without it the stubs refuse them; the flag alone,
// without --stub, is a usage error.
func TestServeStubAllowFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if code, _, errs := runCLI(t, "serve", "--fleet", "demo", "--stub-allow-faults"); code != 2 || !strings.Contains(errs, "--stub-allow-faults: only with --stub") {
		t.Errorf("--stub-allow-faults without --stub: exit %d, %s", code, errs)
	}
	for _, allow := range []bool{true, false} {
		base := freePorts(t, 9)
		args := []string{"serve", "--fleet", "demo", "--stub", "--stub-time-scale", "0", "--base-port", fmt.Sprint(base + 1),
			"--listen", fmt.Sprintf("127.0.0.1:%d", base), "--arm", "static:4P4D"}
		if allow {
			args = append(args, "--stub-allow-faults")
		}
		serve, errs := child(t, args...)
		waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", base), errs)
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/stub/faults", base+1), "application/json", strings.NewReader(`{"slow":2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if (resp.StatusCode == 200) != allow {
			t.Errorf("--stub-allow-faults %v: POST /stub/faults %d", allow, resp.StatusCode)
		}
		serve.Process.Signal(syscall.SIGTERM)
		if err := serve.Wait(); err != nil {
			t.Fatalf("serve after SIGTERM: %v\n%s", err, stderrOf(serve))
		}
	}
}
