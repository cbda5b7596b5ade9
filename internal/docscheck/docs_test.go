package docscheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the repository root, relative to this package.
const root = "../.."

// external are flags the docs cite from other tools.
var external = map[string]string{
	"--goodput":                      "AIPerf's and vLLM's benchmark flag, cited in docs/report.md",
	"--burstiness":                   "vllm bench serve's flag, cited in docs/live.md",
	"--num-warmups":                  "vllm bench serve's flag, cited in docs/live.md",
	"--enable-prompt-tokens-details": "vllm serve's flag, cited in docs/stub.md",
	"--enable-prefix-caching":        "vllm serve's flag, cited in docs/live.md",
	"--warmup-request-count":         "AIPerf's flag, cited in docs/live.md",
	"--bound":                        "campaigns/burstiness.py's flag (docs/controllers.md)",
	"--traces":                       "campaigns/burstiness.py's flag (docs/controllers.md)",
	"--levels":                       "campaigns/burstiness.py's flag (docs/controllers-rounds.md)",
	"--first":                        "campaigns/seed_spread.py's flag (docs/controllers.md)",
	"--bin":                          "campaigns/develop.py's flag (docs/controllers.md)",
	"--pool":                         "campaigns/seed_spread.py's flag (docs/controllers.md)",
	"--pool-dirs":                    "campaigns/seed_spread.py's flag (docs/controllers.md)",
	"--cases":                        "campaigns/develop.py's flag (docs/controllers.md)",
	"--client-cert-auth":             "etcd's flag, cited in docs/ha.md",
	"--prefix":                       "etcdctl role grant-permission's flag, cited in docs/ha.md",
	"--request-rate":                 "vllm bench serve's flag, cited in docs/live.md",
	"--num-prompts":                  "vllm bench serve's flag, cited in docs/live.md",
	"--dataset-name":                 "vllm bench serve's flag, cited in docs/traces.md",
	"--max-logprobs":                 "vllm serve's flag, cited in docs/stub.md",
	"--random-input-len":             "vllm bench serve's flag, cited in docs/live.md and docs/traces.md",
	"--random-output-len":            "vllm bench serve's flag, cited in docs/live.md and docs/traces.md",
	"--ssl-keyfile":                  "vllm serve's flag, cited in docs/security.md",
	"--ssl-certfile":                 "vllm serve's flag, cited in docs/security.md",
	"--ssl-ca-certs":                 "vllm serve's flag, cited in docs/security.md",
	"--ssl-cert-reqs":                "vllm serve's flag, cited in docs/security.md",
	"--kv-transfer-config":           "vllm serve's flag, cited in docs/vllm.md",
	"--served-model-name":            "vllm serve's flag, cited in docs/vllm.md",
	"--tensor-parallel-size":         "vllm serve's flag, cited in docs/vllm.md",
	"--api-key":                      "vllm serve's flag, cited in docs/vllm.md",
	"--port":                         "vllm serve's flag, cited in docs/vllm.md",
}

var flagRE = regexp.MustCompile(`(^|[^-\w])(--[a-z][a-z0-9-]*)`)

// binaryFlags builds both commands and collects the flags every
// subcommand's --help lists.
func binaryFlags(t *testing.T) map[string]string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "./cmd/...")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	flags := map[string]string{}
	for _, c := range [][]string{
		{"narwhal-bench", "sim", "--help"}, {"narwhal-bench", "run", "--help"}, {"narwhal-bench", "export", "--help"},
		{"narwhal-bench", "stub", "--help"}, {"narwhal-bench", "serve", "--help"}, {"narwhal-bench", "live", "--help"},
		{"narwhal-bench", "bundle", "--help"},
		{"narwhal-report", "--help"},
		{"narwhal-bench", "check", "--help"},
		{"narwhal-bench", "profile", "--help"},
		{"narwhal-bench", "cordon", "--help"},
	} {
		out, err := exec.Command(filepath.Join(bin, c[0]), c[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
		_, opts, ok := strings.Cut(string(out), "OPTIONS:")
		if !ok {
			t.Fatalf("%v: no OPTIONS section:\n%s", c, out)
		}
		for _, line := range strings.Split(opts, "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && strings.HasPrefix(f[0], "--") {
				name := strings.TrimSuffix(f[0], ",")
				if name != "--help" && name != "--version" {
					flags[name] = strings.Join(c[:len(c)-1], " ")
				}
			}
		}
	}
	if len(flags) < 15 {
		t.Fatalf("only %d flags found: %v", len(flags), flags)
	}
	return flags
}

func docFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	// The shipped traces, fleets and experiments advise flags in comments.
	for _, pat := range []string{"traces/*.yaml", "fleet/*.yaml", "experiments/*.yaml", "campaigns/*.sh"} {
		more, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, more...)
	}
	return files
}

// TestDocumentedFlagsExist: every --flag named in README.md, docs/*.md and
// the comments of the shipped traces, fleets, experiments and campaign
// scripts is a flag of narwhal-bench or narwhal-report.
func TestDocumentedFlagsExist(t *testing.T) {
	flags := binaryFlags(t)
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
				name := m[2]
				if _, ok := flags[name]; ok {
					continue
				}
				if _, ok := external[name]; ok || name == "--help" || name == "--version" {
					continue
				}
				t.Errorf("%s:%d: %s is not a flag of narwhal-bench or narwhal-report", filepath.Base(f), i+1, name)
			}
		}
	}
}

// TestREADMEDocumentsEveryFlag: every flag of the binaries is named in
// README.md.
func TestREADMEDocumentsEveryFlag(t *testing.T) {
	flags := binaryFlags(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for name, cmd := range flags {
		if !regexp.MustCompile(regexp.QuoteMeta(name) + `\b`).Match(b) {
			missing = append(missing, cmd+" "+name)
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("README.md does not mention %s", m)
	}
}
