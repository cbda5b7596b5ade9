package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"narwhal-bench"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// The --json output carries the documented fields.
func TestSimJSON(t *testing.T) {
	code, out, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D,aggregated", "--rates", "1.6,3.2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Trace     string `json:"trace"`
		Instances int    `json:"instances"`
		Runs      []struct {
			Arm        string   `json:"arm"`
			Rate       float64  `json:"rate"`
			Offered    *int     `json:"offered"`
			Completed  *int     `json:"completed"`
			SLOOK      *int     `json:"slo_ok"`
			Attainment *float64 `json:"attainment"`
		} `json:"runs"`
		Sustained map[string]*float64 `json:"sustained"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Trace != "demo" || res.Instances != 8 || len(res.Runs) != 4 || len(res.Sustained) != 2 {
		t.Fatalf("result %+v", res)
	}
	for _, r := range res.Runs {
		if r.Offered == nil || r.Completed == nil || r.SLOOK == nil || r.Attainment == nil || *r.Offered == 0 {
			t.Fatalf("run %+v misses a field", r)
		}
		if got := float64(*r.SLOOK) / float64(*r.Offered); got != *r.Attainment {
			t.Fatalf("attainment %v != slo_ok/offered %v", *r.Attainment, got)
		}
	}
	// Without --rates a run's rate is the trace's own base rate.
	_, out, _ = runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D", "--json")
	if !strings.Contains(out, `"rate": 2.4`) {
		t.Fatalf("default rate not the trace's base rate: %s", out)
	}
}

// The same seed gives byte-identical output; another seed does not.
func TestSimDeterministic(t *testing.T) {
	args := []string{"sim", "--trace", "demo", "--arms", "static:3P5D,adaptive,arrow", "--rates", "2.4,4.4", "--json"}
	_, a, _ := runCLI(t, args...)
	_, b, _ := runCLI(t, append(args, "--workers", "1")...)
	if a != b || a == "" {
		t.Fatal("two runs of the same experiment differ")
	}
	_, c, _ := runCLI(t, append(args, "--seed", "8")...)
	if c == a {
		t.Fatal("another seed gave the same output")
	}
}

func TestSimTable(t *testing.T) {
	code, out, _ := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "1,2")
	if code != 0 || !strings.Contains(out, "sustained") || !strings.Contains(out, "static:4P4D") ||
		!strings.Contains(out, "best static split: static:4P4D sustains") {
		t.Fatalf("exit %d, table:\n%s", code, out)
	}
}

// Bad input exits 2 with a message naming the problem.
func TestBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--trace", "nosuch"}, `trace "nosuch"`},
		{[]string{"sim", "--arms", "static:9P1D"}, "expected k>=1 prefill and m>=1 decode with k+m = 8"},
		{[]string{"sim", "--arms", "magic"}, `arm "magic": expected one of`},
		{[]string{"sim", "--rates", "fast"}, `rate "fast"`},
		{[]string{"sim", "--fleet", "nofleet"}, `fleet "nofleet"`},
		{[]string{"sim", "--ttft-slo", "2"}, "--ttft-slo: \"2\": a bare number is not a duration"},
		{[]string{"sim", "--bogus"}, "flag provided but not defined"},
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, errs, c.want)
		}
	}
}
