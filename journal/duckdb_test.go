package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The DuckDB test reads the export with a reader that shares no code with
// the writer: DuckDB, through the npm package @duckdb/node-api, driven by
// testdata/duckdb_query.mjs. Install it with `npm ci` at the repository
// root (node_modules is not committed).

// repoRoot walks up from the working directory to the directory holding
// go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// needDuckDB returns the repository root, or skips the test (fails it when
// CI=true) when node or the DuckDB package is missing.
func needDuckDB(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not on PATH (install Node.js 20 or later)"
	} else if _, err := os.Stat(filepath.Join(root, "node_modules", "@duckdb", "node-api", "package.json")); err != nil {
		missing = "node_modules/@duckdb/node-api is missing"
	}
	if missing == "" {
		return root
	}
	msg := fmt.Sprintf("DuckDB cross-check: %s: run `make deps` (or `npm ci`) in %s", missing, root)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// duckQuery runs sql through testdata/duckdb_query.mjs and decodes its rows.
func duckQuery(t *testing.T, root, sql string) []map[string]any {
	t.Helper()
	cmd := exec.Command("node", filepath.Join("journal", "testdata", "duckdb_query.mjs"), sql)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("duckdb query %q: %v\n%s", sql, err, stderr.String())
	}
	var rows []map[string]any
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("duckdb query %q: decoding %q: %v", sql, stdout.String(), err)
	}
	return rows
}

// sqlPath quotes a file path as a SQL string literal.
func sqlPath(p string) string { return "'" + strings.ReplaceAll(p, "'", "''") + "'" }

// quantileCont is DuckDB's quantile_cont: linear interpolation between the
// order statistics around position q*(n-1).
func quantileCont(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	lo := math.Floor(pos)
	hi := math.Ceil(pos)
	if lo == hi {
		return s[int(lo)]
	}
	return s[int(lo)] + (pos-lo)*(s[int(hi)]-s[int(lo)])
}

func TestQuantileCont(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {0.95, 4.8}, {1, 5}, {0.1, 1.4}} {
		if got := quantileCont(xs, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantileCont(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

func TestDuckDBReadsExport(t *testing.T) {
	root := needDuckDB(t)
	journals := writeSynthRoot(t)
	out := t.TempDir()
	stats, err := Export(journals, out)
	if err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return sqlPath(filepath.Join(out, name)) }

	// Row counts per table, as DuckDB sees them.
	rows := duckQuery(t, root, fmt.Sprintf(`SELECT
		(SELECT count(*) FROM %s)::INTEGER AS requests,
		(SELECT count(*) FROM %s)::INTEGER AS role_moves,
		(SELECT count(*) FROM %s)::INTEGER AS decisions,
		(SELECT count(*) FROM %s)::INTEGER AS faults,
		(SELECT count(*) FROM %s)::INTEGER AS runs`,
		file(RequestsFile), file(RoleMovesFile), file(DecisionsFile), file(FaultsFile), file(RunsFile)))
	want := map[string]int64{"requests": stats.Requests, "role_moves": stats.RoleMoves, "decisions": stats.Decisions,
		"faults": stats.Faults, "runs": int64(stats.Runs)}
	for k, v := range want {
		got, err := rows[0][k].(json.Number).Int64()
		if err != nil || got != v {
			t.Errorf("DuckDB count of %s = %v, want %d", k, rows[0][k], v)
		}
	}

	// Per-run request counts and SLO passes, against the journals in Go.
	runs, _ := Runs(journals)
	type perRun struct{ offered, ok int64 }
	goRuns := map[string]perRun{}
	var ttft []float64
	var preempted int64
	for _, dir := range runs {
		r, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		folded, err := Fold(r)
		if err != nil {
			t.Fatal(err)
		}
		pr := perRun{offered: int64(len(folded))}
		for i := range folded {
			row := requestRowOf(filepath.Base(dir), r.Meta(), sloOf(r.Meta()), &folded[i])
			if row.SLOOK {
				pr.ok++
			}
			preempted += folded[i].Preemptions
			if row.Terminal == "finish" {
				ttft = append(ttft, float64(row.TTFTNs))
			}
		}
		goRuns[filepath.Base(dir)] = pr
		r.Close()
	}
	rows = duckQuery(t, root, fmt.Sprintf(`SELECT run, count(*)::INTEGER AS offered, count(*) FILTER (WHERE slo_ok)::INTEGER AS ok
		FROM %s GROUP BY run ORDER BY run`, file(RequestsFile)))
	if len(rows) != len(goRuns) {
		t.Fatalf("DuckDB sees %d runs, want %d", len(rows), len(goRuns))
	}
	for _, row := range rows {
		name := row["run"].(string)
		off, _ := row["offered"].(json.Number).Int64()
		ok, _ := row["ok"].(json.Number).Int64()
		if g := goRuns[name]; g.offered != off || g.ok != ok {
			t.Errorf("run %s: DuckDB offered=%d ok=%d, Go offered=%d ok=%d", name, off, ok, g.offered, g.ok)
		}
	}

	// Preemptions for KV capacity, summed.
	rows = duckQuery(t, root, fmt.Sprintf(`SELECT sum(preemptions)::INTEGER AS n FROM %s`, file(RequestsFile)))
	if n, _ := rows[0]["n"].(json.Number).Int64(); n != preempted || preempted == 0 {
		t.Errorf("preemptions: DuckDB %v, Go %d (want them equal and some)", rows[0]["n"], preempted)
	}

	// The 95th percentile of TTFT over finished requests.
	rows = duckQuery(t, root, fmt.Sprintf(`SELECT quantile_cont(ttft_ns::DOUBLE, 0.95) AS p95, count(*)::INTEGER AS n
		FROM %s WHERE terminal = 'finish'`, file(RequestsFile)))
	p95, err := rows[0]["p95"].(json.Number).Float64()
	if err != nil {
		t.Fatalf("p95 = %v: %v", rows[0]["p95"], err)
	}
	n, _ := rows[0]["n"].(json.Number).Int64()
	goP95 := quantileCont(ttft, 0.95)
	if n != int64(len(ttft)) || math.Abs(p95-goP95) > 1e-9*math.Abs(goP95) {
		t.Fatalf("p95 TTFT: DuckDB %v over %d requests, Go %v over %d", p95, n, goP95, len(ttft))
	}
	t.Logf("p95 TTFT over %d finished requests: DuckDB %.0f ns, Go %.0f ns", n, p95, goP95)

	// Column types, as DuckDB maps the Parquet schema.
	rows = duckQuery(t, root, fmt.Sprintf(`SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM %s)`, file(RequestsFile)))
	types := map[string]string{}
	for _, row := range rows {
		types[row["column_name"].(string)] = row["column_type"].(string)
	}
	for col, typ := range map[string]string{"run": "VARCHAR", "rate": "DOUBLE", "req": "BIGINT", "class": "VARCHAR",
		"admit_ns": "BIGINT", "prefill_inst": "INTEGER", "crossed": "BOOLEAN", "ttft_ns": "BIGINT",
		"terminal": "VARCHAR", "slo_ok": "BOOLEAN", "first_failed_check": "VARCHAR", "reference": "VARCHAR", "response": "VARCHAR",
		"preemptions": "BIGINT", "spilled": "BOOLEAN"} {
		if types[col] != typ {
			t.Errorf("requests.%s: DuckDB type %q, want %s", col, types[col], typ)
		}
	}
	if len(types) != 28 {
		t.Errorf("requests has %d columns, want 28: %v", len(types), types)
	}
	rows = duckQuery(t, root, fmt.Sprintf(`SELECT column_type FROM (DESCRIBE SELECT seed FROM %s)`, file(RunsFile)))
	if rows[0]["column_type"] != "UBIGINT" {
		t.Errorf("runs.seed: DuckDB type %v, want UBIGINT", rows[0]["column_type"])
	}
	// A live run's load-generator fields: a degraded or interrupted load
	// is visible from the export alone.
	rows = duckQuery(t, root, fmt.Sprintf(`SELECT run, target, interrupted, planned::INTEGER AS planned,
		sent::INTEGER AS sent, lag_p99_s, degraded FROM %s WHERE driver = 'live'`, file(RunsFile)))
	if len(rows) != 1 {
		t.Fatalf("live runs in runs.parquet: %v, want the one", rows)
	}
	lag, _ := rows[0]["lag_p99_s"].(json.Number).Float64()
	planned, _ := rows[0]["planned"].(json.Number).Int64()
	sent, _ := rows[0]["sent"].(json.Number).Int64()
	if r := rows[0]; r["run"] != "aggregated_r2.4" || r["target"] != "http://127.0.0.1:8000" || r["interrupted"] != true ||
		planned != 2400 || sent != 2000 || lag != 0.7 || r["degraded"] != true {
		t.Errorf("live run's fields as DuckDB reads them: %v", r)
	}
}
