package live

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"github.com/narwhal-bench/narwhal-bench/internal/strictyaml"
	"github.com/prometheus/client_golang/prometheus"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// TenantsFile is serve --tenants: who may call the router, with what
// share of its admission and at what rate (docs/operations.md, Security).
//
//	required: true          # no key: 401 (else the anonymous tenant)
//	anonymous_weight: 1     # the anonymous tenant's weight when not required
//	tenants:
//	  - name: ops
//	    key_env: NWB_KEY_OPS   # the key is in this environment variable,
//	    # key_file: /etc/narwhal/ops.key   # or in this file (trimmed)
//	    weight: 3              # share of --max-in-flight
//	    max_concurrent: 0      # a cap of its own (0: the share alone)
//	    rate: 20               # requests per second (0: no limit)
//	    burst: 40              # bucket size (default: rate, at least 1)
//	    admin: true            # may read /state, /journal and /metrics
type TenantsFile struct {
	Required        bool         `yaml:"required"`
	AnonymousWeight float64      `yaml:"anonymous_weight"`
	Tenants         []TenantSpec `yaml:"tenants"`
}

// TenantSpec is one tenant of a TenantsFile.
type TenantSpec struct {
	Name          string  `yaml:"name"`
	KeyEnv        string  `yaml:"key_env"`
	KeyFile       string  `yaml:"key_file"`
	Weight        float64 `yaml:"weight"`
	MaxConcurrent int     `yaml:"max_concurrent"`
	Rate          float64 `yaml:"rate"`
	Burst         float64 `yaml:"burst"`
	Admin         bool    `yaml:"admin"`
}

// envKey is the key in the tenant's key_env, trimmed (empty when unset).
func (t TenantSpec) envKey() []byte { return []byte(strings.TrimSpace(os.Getenv(t.KeyEnv))) }

// fileKey is the key in the tenant's key_file, trimmed.
func (t TenantSpec) fileKey() ([]byte, error) {
	kb, err := os.ReadFile(t.KeyFile)
	return bytes.TrimSpace(kb), err
}

// LoadTenants reads a tenants file and every key it names. A key that is
// missing or empty refuses the whole file: the router would otherwise
// serve a tenant it cannot authenticate. Errors name variables and files,
// never key text.
func LoadTenants(path string) (*TenantsFile, [][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var tf TenantsFile
	if errs := strictyaml.Decode(b, &tf); len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s: %w", path, errors.Join(errs...))
	}
	if len(tf.Tenants) == 0 {
		return nil, nil, fmt.Errorf("%s: no tenants", path)
	}
	seen := map[string]bool{"anonymous": true}
	keys := make([][]byte, len(tf.Tenants))
	for i, t := range tf.Tenants {
		where := fmt.Sprintf("%s: tenants[%d] (%s)", path, i, t.Name)
		if t.Name == "" || seen[t.Name] {
			return nil, nil, fmt.Errorf("%s: expected a unique name other than anonymous", where)
		}
		seen[t.Name] = true
		finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
		switch {
		case !(t.Weight > 0) || !finite(t.Weight):
			return nil, nil, fmt.Errorf("%s: weight: %v: expected a number > 0", where, t.Weight)
		case t.MaxConcurrent < 0:
			return nil, nil, fmt.Errorf("%s: max_concurrent: %d: expected >= 0 (0 = no cap of its own)", where, t.MaxConcurrent)
		case !(t.Rate >= 0) || !finite(t.Rate):
			return nil, nil, fmt.Errorf("%s: rate: %v: expected a number >= 0 (0 = no rate limit)", where, t.Rate)
		case !(t.Burst == 0 || t.Burst >= 1) || !finite(t.Burst):
			// A bucket under one token never admits a request.
			return nil, nil, fmt.Errorf("%s: burst: %v: expected 0 (the default: the rate, at least 1) or a number >= 1", where, t.Burst)
		}
		switch {
		case t.KeyEnv != "" && t.KeyFile == "":
			keys[i] = t.envKey()
			if len(keys[i]) == 0 {
				return nil, nil, fmt.Errorf("%s: key_env %s is not set in the environment: the router cannot authenticate this tenant", where, t.KeyEnv)
			}
		case t.KeyFile != "" && t.KeyEnv == "":
			if keys[i], err = t.fileKey(); err != nil {
				return nil, nil, fmt.Errorf("%s: key_file: %w", where, err)
			}
			if len(keys[i]) == 0 {
				return nil, nil, fmt.Errorf("%s: key_file %s is empty", where, t.KeyFile)
			}
		default:
			return nil, nil, fmt.Errorf("%s: expected exactly one of key_env and key_file", where)
		}
	}
	for i := range keys {
		for j := 0; j < i; j++ {
			if subtle.ConstantTimeCompare(keys[i], keys[j]) == 1 {
				// The gate takes the first tenant a key matches: the
				// second would never be seen, its shares and limits a lie.
				return nil, nil, fmt.Errorf("%s: tenants[%d] (%s) has the key of tenants[%d] (%s): expected a key of its own", path, i, tf.Tenants[i].Name, j, tf.Tenants[j].Name)
			}
		}
	}
	if !(tf.AnonymousWeight >= 0) || math.IsInf(tf.AnonymousWeight, 0) {
		return nil, nil, fmt.Errorf("%s: anonymous_weight %v: expected >= 0", path, tf.AnonymousWeight)
	}
	return &tf, keys, nil
}

// MinKeyBytes is the key length under which the router warns at start: a
// short key can be guessed by a client allowed to try.
const MinKeyBytes = 16

// ShortKeys names the tenants whose key (LoadTenants) is shorter than
// MinKeyBytes.
func ShortKeys(tf *TenantsFile, keys [][]byte) []string {
	var short []string
	for i, k := range keys {
		if len(k) < MinKeyBytes {
			short = append(short, tf.Tenants[i].Name)
		}
	}
	return short
}

// TenantKeysFound reads a tenants file for the keys it names that can be
// read here (a key_file that opens, a key_env that is set), and names the
// others: for tools that redact keys (bundle), where LoadTenants' rule, a
// missing key refuses the file, would leave every key unredacted. err
// says the file is no tenants file.
func TenantKeysFound(path string) (keys [][]byte, missing []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var tf TenantsFile
	if errs := strictyaml.Decode(b, &tf); len(errs) > 0 || len(tf.Tenants) == 0 {
		return nil, nil, fmt.Errorf("%s: not a tenants file", path)
	}
	for _, t := range tf.Tenants {
		// Both, when a (refused) file names both: redact what it names.
		if t.KeyEnv != "" {
			if k := t.envKey(); len(k) > 0 {
				keys = append(keys, k)
			} else {
				missing = append(missing, fmt.Sprintf("tenant %s: key_env %s is not set here", t.Name, t.KeyEnv))
			}
		}
		if t.KeyFile != "" {
			if k, err := t.fileKey(); err == nil && len(k) > 0 {
				keys = append(keys, k)
			} else {
				missing = append(missing, fmt.Sprintf("tenant %s: key_file %s does not read here", t.Name, t.KeyFile))
			}
		}
	}
	return keys, missing, nil
}

// Gate is the router's front door when tenants are configured: it
// authenticates each call, holds each tenant to its share of admission
// and its rate, and keeps the operator routes to admin tenants.
type Gate struct {
	required bool
	limit    int
	tenants  []*tenant
	anon     *tenant // nil when keys are required
	mu       sync.Mutex
	total    int // requests in flight through the gate
	now      func() time.Time
}

type tenant struct {
	name   string
	digest [sha256.Size]byte
	cap    int
	rate   float64
	burst  float64
	admin  bool
	// Under Gate.mu.
	inflight int
	tokens   float64
	last     time.Time
	served   int
	// rejected counts refusals by code (tenant_rate, tenant_concurrency).
	rejected map[string]int
}

// NewGate builds the gate for tf's tenants with their keys (LoadTenants),
// cutting shares from limit (the router's MaxInFlight): a tenant's cap is
// max(1, round-half-even(limit × weight / total weight)), lowered to its
// max_concurrent when set; the anonymous tenant shares when keys are not
// required.
func NewGate(tf *TenantsFile, keys [][]byte, limit int) *Gate {
	g := &Gate{required: tf.Required, limit: limit, now: time.Now}
	total := 0.0
	for _, t := range tf.Tenants {
		total += t.Weight
	}
	anonWeight := tf.AnonymousWeight
	if !tf.Required {
		if anonWeight == 0 {
			anonWeight = 1
		}
		total += anonWeight
	}
	share := func(w float64, own int) int {
		c := max(1, int(math.RoundToEven(float64(limit)*w/total)))
		if own > 0 {
			c = min(c, own)
		}
		return c
	}
	for i, t := range tf.Tenants {
		burst := t.Burst
		if burst == 0 {
			burst = max(t.Rate, 1)
		}
		g.tenants = append(g.tenants, &tenant{name: t.Name, digest: sha256.Sum256(keys[i]), cap: share(t.Weight, t.MaxConcurrent),
			rate: t.Rate, burst: burst, admin: t.Admin, tokens: burst})
	}
	if !tf.Required {
		g.anon = &tenant{name: "anonymous", cap: share(anonWeight, 0)}
	}
	return g
}

// Caps returns each tenant's in-flight cap by name (only tests call it).
func (g *Gate) Caps() map[string]int {
	m := map[string]int{}
	for _, t := range g.tenants {
		m[t.name] = t.cap
	}
	if g.anon != nil {
		m[g.anon.name] = g.anon.cap
	}
	return m
}

// identify finds the caller's tenant: the key after "Bearer " in
// Authorization, else X-Api-Key. Every tenant's digest is compared, in
// constant time, whatever matches first. ok is false for a key that is
// presented and unknown; t is nil for no key.
func (g *Gate) identify(q *http.Request) (t *tenant, presented bool) {
	key := ""
	if h := q.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		key = strings.TrimSpace(h[7:])
	} else if h := q.Header.Get("X-Api-Key"); h != "" {
		key = strings.TrimSpace(h)
	}
	if key == "" {
		return nil, false
	}
	d := sha256.Sum256([]byte(key))
	for _, c := range g.tenants {
		if subtle.ConstantTimeCompare(d[:], c.digest[:]) == 1 && t == nil {
			t = c
		}
	}
	return t, true
}

// adminPaths are the operator routes: with tenants configured, only an
// admin tenant reads them.
func adminPath(p string) bool {
	return p == "/state" || p == "/journal" || p == "/metrics" || strings.HasPrefix(p, "/debug/") || strings.HasPrefix(p, "/engines/")
}

// Wrap puts the gate in front of next.
func (g *Gate) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path == "/health" || q.URL.Path == "/ping" || q.URL.Path == "/ready" || q.URL.Path == "/v1/models" {
			next.ServeHTTP(w, q)
			return
		}
		t, presented := g.identify(q)
		switch {
		case presented && t == nil:
			api.WriteError(w, &api.Error{Status: http.StatusUnauthorized, Type: api.TypeInvalidRequest, Code: "invalid_api_key",
				Message: "the API key is not valid for this router"})
			return
		case t == nil && g.anon == nil:
			api.WriteError(w, &api.Error{Status: http.StatusUnauthorized, Type: api.TypeInvalidRequest, Code: "missing_api_key",
				Message: "this router requires an API key: Authorization: Bearer KEY"})
			return
		case t == nil:
			t = g.anon
		}
		if adminPath(q.URL.Path) {
			if !t.admin {
				api.WriteError(w, &api.Error{Status: http.StatusForbidden, Type: "permission_error", Code: "not_admin",
					Message: "tenant " + t.name + " may not use " + q.URL.Path + ": an admin tenant's key is required"})
				return
			}
			next.ServeHTTP(w, q)
			return
		}
		if q.Header.Get(HeaderScheduled) != "" && !t.admin {
			// It moves the request's measured start: TTFT, the journal's
			// and the metrics' latencies, SLO attainment.
			api.WriteError(w, &api.Error{Status: http.StatusForbidden, Type: "permission_error", Code: "not_admin",
				Message: "tenant " + t.name + " may not send " + HeaderScheduled + ": an admin tenant's key is required"})
			return
		}
		if e := g.acquire(t); e != nil {
			api.WriteError(w, e)
			return
		}
		defer g.release(t)
		next.ServeHTTP(w, q)
	})
}

// acquire admits one request of t through the gate, or says why not.
func (g *Gate) acquire(t *tenant) *api.Error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.rate > 0 {
		now := g.now()
		if !t.last.IsZero() {
			t.tokens = min(t.burst, t.tokens+now.Sub(t.last).Seconds()*t.rate)
		}
		t.last = now
		if t.tokens < 1 {
			t.reject("tenant_rate")
			wait := time.Duration((1 - t.tokens) / t.rate * float64(time.Second))
			return &api.Error{Status: http.StatusTooManyRequests, Type: api.TypeRateLimit, Code: "tenant_rate",
				Message: fmt.Sprintf("tenant %s is over its rate of %g requests/s", t.name, t.rate), RetryAfter: max(wait, time.Second)}
		}
	}
	if t.inflight >= t.cap || g.total >= g.limit {
		t.reject("tenant_concurrency")
		return &api.Error{Status: http.StatusTooManyRequests, Type: api.TypeRateLimit, Code: "tenant_concurrency",
			Message: fmt.Sprintf("tenant %s has %d requests in flight, its share", t.name, t.inflight), RetryAfter: time.Second}
	}
	if t.rate > 0 {
		t.tokens--
	}
	t.inflight++
	g.total++
	t.served++
	return nil
}

func (t *tenant) reject(code string) {
	if t.rejected == nil {
		t.rejected = map[string]int{}
	}
	t.rejected[code]++
}

// Gate metrics (Collector): what the gate let through and refused, per
// tenant, so that a gate saturating shows where the core's refusals would
// have.
var (
	tenantRequestsDesc = prometheus.NewDesc("narwhal_tenant_requests_total",
		"Requests through the tenant gate, by tenant and outcome: served, or the code it was refused with (tenant_rate, tenant_concurrency).",
		[]string{"tenant", "outcome"}, nil)
	tenantInFlightDesc = prometheus.NewDesc("narwhal_tenant_in_flight", "Requests of each tenant in flight through the gate.", []string{"tenant"}, nil)
	tenantCapDesc      = prometheus.NewDesc("narwhal_tenant_cap", "Each tenant's in-flight cap.", []string{"tenant"}, nil)
)

// Describe implements prometheus.Collector.
func (g *Gate) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantRequestsDesc
	ch <- tenantInFlightDesc
	ch <- tenantCapDesc
}

// Collect implements prometheus.Collector: register the gate with the
// router's registry (Router.Registry) and /metrics carries it.
func (g *Gate) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	all := g.tenants
	if g.anon != nil {
		all = append(all[:len(all):len(all)], g.anon)
	}
	for _, t := range all {
		ch <- prometheus.MustNewConstMetric(tenantRequestsDesc, prometheus.CounterValue, float64(t.served), t.name, "served")
		for _, code := range []string{"tenant_rate", "tenant_concurrency"} {
			ch <- prometheus.MustNewConstMetric(tenantRequestsDesc, prometheus.CounterValue, float64(t.rejected[code]), t.name, code)
		}
		ch <- prometheus.MustNewConstMetric(tenantInFlightDesc, prometheus.GaugeValue, float64(t.inflight), t.name)
		ch <- prometheus.MustNewConstMetric(tenantCapDesc, prometheus.GaugeValue, float64(t.cap), t.name)
	}
}

func (g *Gate) release(t *tenant) {
	g.mu.Lock()
	t.inflight--
	g.total--
	g.mu.Unlock()
}

// WithEngineKey makes every engine request (both legs, probes) carry
// Authorization: Bearer key, as vLLM's --api-key expects. The key is set
// on a copy of each request and never logged.
func WithEngineKey(rt http.RoundTripper, key string) http.RoundTripper {
	if key == "" {
		return rt
	}
	return &keyTransport{rt: rt, auth: "Bearer " + key}
}

type keyTransport struct {
	rt   http.RoundTripper
	auth string
}

func (k *keyTransport) RoundTrip(q *http.Request) (*http.Response, error) {
	c := q.Clone(q.Context())
	c.Header.Set("Authorization", k.auth)
	return k.rt.RoundTrip(c)
}
