package live

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzStartTime: an engine's /metrics text, whatever its bytes, is read
// without a panic; the start time read is 0 (none) or a finite time after
// the epoch (NaN would read as a restart at every probe, and neither NaN
// nor an infinity encodes in GET /state). A whole sample line before the
// text is the one read, whatever follows.
func FuzzStartTime(f *testing.F) {
	for _, s := range []string{
		// vLLM's /metrics (prometheus_client's process collector).
		"# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.71234567891e+09\n",
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\nprocess_start_time_seconds 1.7e9\n",
		"process_start_time_seconds{pid=\"1\"} 1712345678.5 1712345679000\n",
		"process_start_time_seconds NaN\n", "process_start_time_seconds +Inf\n", "process_start_time_seconds -1\n",
		"process_start_time_seconds 0\nprocess_start_time_seconds 5\n", "process_start_time_seconds_total 3\n",
		"process_start_time_seconds{ 4\n", "process_start_time_seconds\t1e9", "process_start_time_seconds", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := startTime(strings.NewReader(string(data)))
		if v != 0 && !(v > 0 && !math.IsInf(v, 0)) {
			t.Fatalf("%q: start time %v", data, v)
		}
		const first = 1.7e9
		if got := startTime(strings.NewReader(fmt.Sprintf("process_start_time_seconds %v\n%s", first, data))); got != first {
			t.Fatalf("%q after a sample line: start time %v, want %v", data, got, float64(first))
		}
	})
}

// FuzzUsage: a whole answer's body, whatever its bytes, is read without a
// panic: its cached prompt tokens and completion tokens are 0 or more. In
// vLLM's shape, the usage's counts are read back: a negative completion
// count is none (one per choice counts, as api.ReadChunk reads a stream's
// usage), a negative cached count 0.
func FuzzUsage(f *testing.F) {
	for _, s := range []string{
		`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":"length"}],"usage":{"prompt_tokens":48,"total_tokens":49,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}}`,
		`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":7,"prompt_tokens_details":null}}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}`,
		`{"choices":[{"finish_reason":null},{}]}`, `{"usage":{"completion_tokens":-3,"prompt_tokens_details":{"cached_tokens":-1}}}`,
		`{"usage":{"completion_tokens":1e3}}`, `{"usage":null}`, `[]`, `null`, `{`, ``,
	} {
		f.Add([]byte(s), 5, 2)
	}
	f.Fuzz(func(t *testing.T, body []byte, completion, cached int) {
		if c := promptCached(body); c < 0 {
			t.Fatalf("%q: %d cached tokens", body, c)
		}
		if n, _ := nonStreamTokens(body); n < 0 {
			t.Fatalf("%q: %d completion tokens", body, n)
		}
		b := fmt.Sprintf(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`, completion, cached)
		wantN := completion
		if completion < 0 {
			wantN = 1
		}
		if n, finish := nonStreamTokens([]byte(b)); n != wantN || finish != "stop" {
			t.Fatalf("%s: %d tokens, finish %q; want %d, stop", b, n, finish, wantN)
		}
		if c := promptCached([]byte(b)); c != max(cached, 0) {
			t.Fatalf("%s: %d cached tokens, want %d", b, c, max(cached, 0))
		}
	})
}

// FuzzScheduled: any X-Narwhal-Scheduled-Ns value is read without a panic;
// one taken is a whole number of nanoseconds from 0 to the bound, the
// number the header says; one refused gets a 400 that names the header.
// Every time from 0 to the bound, written in decimal, is taken.
func FuzzScheduled(f *testing.F) {
	for _, s := range []string{"0", "1712345678901234567", "1500000000", "-1", "+5", "007", "1e9", " 5", "9223372036854775808", "", "x"} {
		f.Add(s, int64(2*time.Second), int64(1e9))
	}
	f.Fuzz(func(t *testing.T, s string, hi, n int64) {
		bound := time.Second + time.Duration(max(hi, 0)%int64(1<<62))
		at, e := parseScheduled(s, bound)
		if e != nil {
			if at != 0 || e.Status != http.StatusBadRequest || e.Param != HeaderScheduled || !strings.HasPrefix(e.Message, HeaderScheduled+": ") {
				t.Fatalf("%q: %v, error %+v", s, at, e)
			}
		} else {
			ns, err := strconv.ParseInt(s, 10, 64)
			if err != nil || time.Duration(ns) != at || at < 0 || at > bound {
				t.Fatalf("%q (bound %d): took %d", s, bound, at)
			}
		}
		if n < 0 {
			n = -(n + 1)
		}
		n %= int64(bound) + 1
		if at, e := parseScheduled(strconv.FormatInt(n, 10), bound); e != nil || at != time.Duration(n) {
			t.Fatalf("%d (bound %d): %v, %v", n, bound, at, e)
		}
	})
}

// FuzzIdentify: any Authorization and X-Api-Key headers are read without
// a panic; no key presented is no tenant, a tenant found is the one whose
// key was presented (after "Bearer ", any case, or in X-Api-Key), and a
// key reads the same in either header.
func FuzzIdentify(f *testing.F) {
	keys := map[string]string{"a": "sk-tenant-a", "ops": "sk-ops"}
	g := NewGate(&TenantsFile{Tenants: []TenantSpec{{Name: "a", Weight: 1}, {Name: "ops", Weight: 1, Admin: true}}},
		[][]byte{[]byte(keys["a"]), []byte(keys["ops"])}, 64)
	for _, h := range [][2]string{
		{"Bearer sk-tenant-a", ""}, {"bearer  sk-ops ", ""}, {"", "sk-tenant-a"}, {"Basic dXNlcjpwYXNz", "sk-ops"},
		{"Bearer ", "sk-ops"}, {"Bearer", ""}, {"Bearer wrong", "sk-ops"}, {"BEARER sk-tenant-a\t", ""}, {"", " "}, {"", ""},
	} {
		f.Add(h[0], h[1])
	}
	ask := func(auth, apiKey string) (*tenant, bool) {
		q, _ := http.NewRequest(http.MethodPost, "http://router/v1/completions", nil)
		if auth != "" {
			q.Header.Set("Authorization", auth)
		}
		if apiKey != "" {
			q.Header.Set("X-Api-Key", apiKey)
		}
		return g.identify(q)
	}
	f.Fuzz(func(t *testing.T, auth, apiKey string) {
		tn, presented := ask(auth, apiKey)
		if !presented && tn != nil {
			t.Fatalf("%q, %q: tenant %s with no key presented", auth, apiKey, tn.name)
		}
		if tn != nil {
			k := keys[tn.name]
			if strings.TrimSpace(apiKey) != k && !(len(auth) > 7 && strings.TrimSpace(auth[7:]) == k) {
				t.Fatalf("%q, %q: tenant %s, whose key neither header holds", auth, apiKey, tn.name)
			}
		}
		// The same key, as a bearer token: the same answer.
		if strings.TrimSpace(apiKey) != "" {
			t1, p1 := ask("", apiKey)
			t2, p2 := ask("bEaReR "+apiKey, "")
			if t1 != t2 || p1 != p2 || !p1 {
				t.Fatalf("%q: X-Api-Key gives %v, %v; as a bearer token %v, %v", apiKey, t1, p1, t2, p2)
			}
		}
	})
}
