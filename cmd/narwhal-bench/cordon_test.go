package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/live"
)

// cordon against a router in another process: it cordons a decode engine
// holding streams, --wait sees them finish (each stream whole), and
// --uncordon returns it; bad flags and unknown engines exit 2, an
// unreachable router 1, the last engine taking placements 1.
func TestCordonCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	base := freePorts(t, 4)
	router := fmt.Sprintf("http://127.0.0.1:%d", base)
	fleetFile := filepath.Join(t.TempDir(), "three.yaml")
	os.WriteFile(fleetFile, []byte(`name: three
instances:
  count: 3
  profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.01}
slo: {ttft: 2s, tpot: 100ms}
`), 0o644)
	_, errb := child(t, "serve", "--fleet", fleetFile, "--arm", "static:1P2D", "--stub", "--base-port", fmt.Sprint(base+1),
		"--listen", fmt.Sprintf("127.0.0.1:%d", base), "--model", "stub")
	waitHTTP(t, router+"/health", errb)

	// Four streams of 60 tokens on the decode engine (10 ms a token).
	var wg sync.WaitGroup
	bodies := make([]string, 4)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(router+"/v1/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":"stub","prompt":"drain me %d","max_tokens":60,"min_tokens":60,"stream":true}`, i)))
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			buf := make([]byte, 4096)
			for {
				n, err := resp.Body.Read(buf)
				b.Write(buf[:n])
				if err != nil {
					break
				}
			}
			bodies[i] = b.String()
		}()
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, err := http.Get(router + "/state")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st live.State
		if json.Unmarshal(b, &st) == nil && len(st.Engines) == 3 && st.Engines[1].DecodeLegs > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decode leg on e1: %s", b)
		}
	}
	code, out, errs := runCLI(t, "cordon", "--router", router, "--engine", "e1", "--wait", "20s")
	if code != 0 || !strings.Contains(out, "e1 cordoned:") || !strings.Contains(out, "e1 drained in") {
		t.Fatalf("cordon --wait: exit %d\n%s%s", code, out, errs)
	}
	wg.Wait()
	for i, b := range bodies {
		if strings.Count(b, `"text"`) != 60 || !strings.Contains(b, "[DONE]") || strings.Contains(b, `"error"`) {
			t.Errorf("stream %d cut by the cordon: %.300s", i, b)
		}
	}
	// e0, the one prefill engine, cannot be cordoned: e2 alone decodes
	// now, and could not take its role.
	if code, out, errs := runCLI(t, "cordon", "--router", router, "--engine", "e0"); code != 1 || !strings.Contains(errs, "last online prefill engine") {
		t.Errorf("cordon the last engine: exit %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, "cordon", "--router", router, "--engine", "e1", "--uncordon"); code != 0 || out != "e1 uncordoned: it takes placements again\n" {
		t.Errorf("uncordon: exit %d %q %q", code, out, errs)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--router", router, "--engine", "e9"}, 2, `--engine "e9": the router has no such engine`},
		{[]string{"--router", router, "--engine", "e1", "--wait", "soon"}, 2, `--wait "soon": expected a duration`},
		{[]string{"--router", router, "--engine", "e1", "--wait", "1s", "--uncordon"}, 2, "--wait: only when cordoning"},
		{[]string{"--router", "localhost:1", "--engine", "e1"}, 2, `--router "localhost:1": expected the router's base URL`},
		{[]string{"--router", "http://127.0.0.1:1", "--engine", "e1"}, 1, "cordon: cordon e1:"},
		{[]string{"--router", router, "--engine", "e1", "--api-key-env", "NWB_NO_SUCH_VARIABLE"}, 2, "--api-key-env NWB_NO_SUCH_VARIABLE: the variable is empty or unset"},
	} {
		if code, out, errs := runCLI(t, append([]string{"cordon"}, c.args...)...); code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %q %q, expected %d and %q", c.args, code, out, errs, c.code, c.want)
		}
	}
}
