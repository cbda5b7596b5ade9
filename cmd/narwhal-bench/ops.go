package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v3"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/journal"
	"github.com/narwhal-bench/narwhal-bench/live"
	"github.com/narwhal-bench/narwhal-bench/live/api"
	"github.com/narwhal-bench/narwhal-bench/live/ha"
)

// opsFlags are serve's high-availability and security flags
// (docs/operations.md).
func opsFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "ha", Usage: "run active-passive with leader election on etcd: etcd://HOST:PORT[,HOST:PORT...] (default: alone)"},
		&cli.StringFlag{Name: "ha-lease", Value: "2s", Usage: "with --ha: the leader's lease; a standby takes over within about this long after the leader dies"},
		&cli.StringFlag{Name: "ha-prefix", Usage: "with --ha: etcd key prefix shared by this fleet's routers (default /narwhal-bench/FLEET/)"},
		&cli.StringFlag{Name: "ha-cacert", Usage: "with --ha: reach etcd over TLS, verifying its certificate with this PEM CA bundle"},
		&cli.StringFlag{Name: "ha-cert", Usage: "with --ha: this router's PEM client certificate for an etcd that checks them (with --ha-key; TLS)"},
		&cli.StringFlag{Name: "ha-key", Usage: "with --ha: the PEM private key of --ha-cert"},
		&cli.StringFlag{Name: "ha-user", Usage: "with --ha: log in to etcd (authentication on) as this user; the password from --ha-password-env or --ha-password-file"},
		&cli.StringFlag{Name: "ha-password-env", Usage: "with --ha-user: the environment variable holding the etcd password"},
		&cli.StringFlag{Name: "ha-password-file", Usage: "with --ha-user: the file holding the etcd password"},
		&cli.StringFlag{Name: "tenants", Usage: "tenants file: API keys (from environment variables or files), shares of admission, rates, admin rights"},
		&cli.StringFlag{Name: "tls-cert", Usage: "serve HTTPS with this PEM certificate (with --tls-key)"},
		&cli.StringFlag{Name: "tls-key", Usage: "the PEM private key of --tls-cert"},
		&cli.StringFlag{Name: "tls-client-ca", Usage: "with --tls-cert: require of every client a certificate signed by a CA of this PEM bundle (mutual TLS, as vLLM --ssl-ca-certs with --ssl-cert-reqs 2), /health and /metrics included"},
	}, engineFlags()...)
}

// engineFlags reach the engines: their API key and TLS (serve, check,
// live --fleet).
func engineFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "engine-api-key-env", Usage: "send Authorization: Bearer $VAR to the engines on every call (vLLM --api-key)"},
		&cli.StringFlag{Name: "engine-api-key-file", Usage: "as --engine-api-key-env, the key read from this file"},
		&cli.StringFlag{Name: "engine-cacert", Usage: "verify https:// engines' certificates with this PEM CA bundle (vLLM --ssl-certfile signed by a private CA; default: the system's roots)"},
		&cli.StringFlag{Name: "engine-cert", Usage: "present this PEM client certificate to https:// engines that require one (vLLM --ssl-ca-certs with --ssl-cert-reqs 2; with --engine-key)"},
		&cli.StringFlag{Name: "engine-key", Usage: "the PEM private key of --engine-cert"},
	}
}

// engineTransport is the transport engineFlags ask for: nil (the caller's
// default) without any, else base (a new live.NewTransport when nil) with
// the TLS configuration and the key set on every call. A bad flag is bad
// input, said before anything starts.
func engineTransport(c *cli.Command, base *http.Transport) (http.RoundTripper, error) {
	key, err := secretFlag(c, "engine-api-key")
	if err != nil {
		return nil, err
	}
	ca, cert, ekey := c.String("engine-cacert"), c.String("engine-cert"), c.String("engine-key")
	if key == "" && ca == "" && cert == "" && ekey == "" {
		return nil, nil
	}
	if base == nil {
		base = live.NewTransport()
	}
	tlsCfg, err := clientTLS(c, "engine-cacert", "engine-cert", "engine-key")
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		base.TLSClientConfig = tlsCfg
	}
	return live.WithEngineKey(base, key), nil
}

// clientTLS reads a TLS client's flags: caFlag, a PEM CA bundle that
// verifies the server's certificate (default: the system's roots), and
// certFlag with keyFlag, a PEM client certificate and its key (both or
// neither). It returns nil when none is given; a bad one is bad input,
// naming the flags (engines, etcd, and a router's front door).
func clientTLS(c *cli.Command, caFlag, certFlag, keyFlag string) (*tls.Config, error) {
	ca, cert, key := c.String(caFlag), c.String(certFlag), c.String(keyFlag)
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	if (cert == "") != (key == "") {
		return nil, usageError{fmt.Errorf("--%s and --%s: expected both or neither", certFlag, keyFlag)}
	}
	cfg, err := ha.TLSConfig(ca, cert, key)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s %q, --%s %q, --%s %q: %w: expected PEM files", caFlag, ca, certFlag, cert, keyFlag, key, err)}
	}
	return cfg, nil
}

// routerClientFlags reach a server over HTTPS, verifying it with a private
// CA and presenting a client certificate where it requires one (serve
// --tls-client-ca, vLLM --ssl-cert-reqs 2): live --target, bundle --router.
func routerClientFlags(with string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cacert", Usage: "with " + with + ": verify an https:// server's certificate with this PEM CA bundle (default: the system's roots)"},
		&cli.StringFlag{Name: "cert", Usage: "with " + with + ": present this PEM client certificate to a server that requires one (serve --tls-client-ca; with --key)"},
		&cli.StringFlag{Name: "key", Usage: "the PEM private key of --cert"},
	}
}

// routerClientTLS reads routerClientFlags for the server at urlFlag: nil
// when none is given. Given without urlFlag they are refused; with a plain
// http:// URL they are said on stderr to be unused.
func routerClientTLS(c *cli.Command, urlFlag string, stderr io.Writer) (*tls.Config, error) {
	u := c.String(urlFlag)
	if u == "" {
		for _, f := range []string{"cacert", "cert", "key"} {
			if c.String(f) != "" {
				return nil, usageError{fmt.Errorf("--%s: needs --%s (the server it reaches over HTTPS)", f, urlFlag)}
			}
		}
	}
	cfg, err := clientTLS(c, "cacert", "cert", "key")
	if err != nil || cfg == nil {
		return nil, err
	}
	if !strings.HasPrefix(u, "https://") {
		fmt.Fprintf(stderr, "narwhal-bench: note: --cacert/--cert given, but --%s %s is not https://: they are not used\n", urlFlag, u)
	}
	return cfg, nil
}

// engineFlagGiven is the first of engineFlags on the command line, as
// --NAME, or "" when none is.
func engineFlagGiven(c *cli.Command) string {
	for _, f := range engineFlags() {
		if name := f.Names()[0]; c.String(name) != "" {
			return "--" + name
		}
	}
	return ""
}

// noteEngineTLSUnused says on stderr that --engine-cacert or --engine-cert
// was given but none of the engines' urls is https://: they are not used.
func noteEngineTLSUnused(c *cli.Command, urls []string, stderr io.Writer) {
	if c.String("engine-cacert") == "" && c.String("engine-cert") == "" {
		return
	}
	for _, u := range urls {
		if strings.HasPrefix(u, "https://") {
			return
		}
	}
	fmt.Fprintln(stderr, "narwhal-bench: note: --engine-cacert/--engine-cert given, but no engine URL is https://: they are not used")
}

// frontDoor is the handler serve listens with: CORS (--allowed-origins),
// then the tenant gate (when configured), in front of GET /journal and of
// whatever serves now (the standby's answers, then the router's).
type frontDoor struct {
	inner   atomic.Pointer[http.Handler]
	jw      atomic.Pointer[journal.Writer]
	origins []string
}

func (f *frontDoor) set(h http.Handler) { f.inner.Store(&h) }

func (f *frontDoor) handler(gate *live.Gate) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /journal", f.journalStatus)
	mux.HandleFunc("/", func(w http.ResponseWriter, q *http.Request) { (*f.inner.Load()).ServeHTTP(w, q) })
	var h http.Handler = mux
	if gate != nil {
		h = gate.Wrap(mux)
	}
	return live.CORS(f.origins, h)
}

// journalStatus is GET /journal: the journal's directory and the last
// acknowledged sequence number. Every record up to acked_seq is on disk
// (synced) and survives a kill -9 of the router; later ones may not.
func (f *frontDoor) journalStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	jw := f.jw.Load()
	if jw == nil {
		_ = json.NewEncoder(w).Encode(map[string]any{"journal": false})
		return
	}
	st := map[string]any{"journal": true, "dir": jw.Dir(), "acked_seq": jw.Acked()}
	if err := jw.Err(); err != nil {
		st["error"] = err.Error()
	}
	_ = json.NewEncoder(w).Encode(st)
}

// standbyHandler answers while this router waits for the leadership:
// /health says standby (200, so a load balancer can tell it is alive but
// should prefer the leader by its body), /state shows the leader's last
// published state, /metrics serves narwhal_ha_standby 1 and the process's
// own series (so Prometheus sees it up, and no router-down alert fires
// for a healthy standby), requests get 503 with Retry-After.
func standbyHandler(node *ha.Node) http.Handler {
	mux := http.NewServeMux()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	standby := prometheus.NewGauge(prometheus.GaugeOpts{Name: "narwhal_ha_standby",
		Help: "1 while this router is a high-availability standby (the leader's /metrics has the router's series instead)."})
	standby.Set(1)
	reg.MustRegister(standby)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "standby", "leader": node.Leader(q.Context())})
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, q *http.Request) {
		d, err := node.Latest(q.Context())
		if err != nil {
			api.WriteError(w, api.Unavailable(err.Error(), time.Second))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"standby": true, "leader": node.Leader(q.Context()), "published": d})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, q *http.Request) {
		e := api.Unavailable("this router is a standby; the leader serves", time.Second)
		e.Code = "standby"
		api.WriteError(w, e)
	})
	return mux
}

// secretFlag reads the secret that flags NAME-env (an environment
// variable's name) and NAME-file (a file) give, at most one of them: ""
// when neither is set. Trailing line ends are dropped, nothing else (a
// password may begin or end with a space).
func secretFlag(c *cli.Command, name string) (string, error) {
	env, file := c.String(name+"-env"), c.String(name+"-file")
	var v, from string
	switch {
	case env != "" && file != "":
		return "", usageError{fmt.Errorf("--%s-env and --%s-file: expected one", name, name)}
	case env != "":
		v, from = strings.TrimRight(os.Getenv(env), "\r\n"), fmt.Sprintf("--%s-env: %s", name, env)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usageError{fmt.Errorf("--%s-file: %w", name, err)}
		}
		v, from = strings.TrimRight(string(b), "\r\n"), fmt.Sprintf("--%s-file: %s", name, file) // a file's last newline is no part of it
	default:
		return "", nil
	}
	switch {
	case strings.TrimSpace(v) == "":
		if env != "" {
			return "", usageError{fmt.Errorf("%s is not set in the environment, or blank", from)}
		}
		return "", usageError{fmt.Errorf("%s is empty", from)}
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return "", usageError{fmt.Errorf("%s holds a line break or another control character: expected one line", from)}
	}
	return v, nil
}

// haSecurityFlags reach etcd over TLS and log in to it.
var haSecurityFlags = []string{"ha-cacert", "ha-cert", "ha-key", "ha-user", "ha-password-env", "ha-password-file"}

// haSecurity reads haSecurityFlags: the TLS configuration (nil for plain
// http) and the user and password ("" for none).
func haSecurity(c *cli.Command) (tlsCfg *tls.Config, user, password string, err error) {
	if tlsCfg, err = clientTLS(c, "ha-cacert", "ha-cert", "ha-key"); err != nil {
		return nil, "", "", err
	}
	if password, err = secretFlag(c, "ha-password"); err != nil {
		return nil, "", "", err
	}
	user = c.String("ha-user")
	if (user == "") != (password == "") {
		return nil, "", "", usageError{errors.New("--ha-user and --ha-password-env or --ha-password-file: expected both or neither")}
	}
	return tlsCfg, user, password, nil
}

// opsSetup reads the security flags: the tenant gate (nil without
// --tenants), the front door's TLS (nil without --tls-cert) and the engine
// key. A tenant key under live.MinKeyBytes is said on stderr.
func opsSetup(c *cli.Command, cfg *live.Config, stderr io.Writer) (*live.Gate, *certReloader, error) {
	certs, err := frontTLS(c)
	if err != nil {
		return nil, nil, err
	}
	if c.String("ha") == "" {
		for _, f := range haSecurityFlags {
			if c.String(f) != "" {
				return nil, nil, usageError{fmt.Errorf("--%s: only with --ha", f)}
			}
		}
	} else if _, _, _, err := haSecurity(c); err != nil {
		return nil, nil, err // read again when joining; refused here before anything starts
	}
	if cfg.Transport != nil {
		return nil, nil, errors.New("the engine flags: the router's transport was set already") // a programming error
	}
	tr, err := engineTransport(c, nil)
	if err != nil {
		return nil, nil, err
	}
	cfg.Transport = tr // nil: the router's default
	path := c.String("tenants")
	if path == "" {
		return nil, certs, nil
	}
	tf, keys, err := live.LoadTenants(path)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--tenants: %w", err)}
	}
	if short := live.ShortKeys(tf, keys); len(short) > 0 {
		whose := "the key of " + short[0] + " is"
		if len(short) > 1 {
			whose = "the keys of " + strings.Join(short, ", ") + " are"
		}
		fmt.Fprintf(stderr, "narwhal-bench: note: --tenants %s: %s under %d bytes, short enough to guess (make one with: openssl rand -hex 32)\n", path, whose, live.MinKeyBytes)
	}
	return live.NewGate(tf, keys, cfg.MaxInFlight), certs, nil
}

// frontTLS reads the front door's TLS flags: nil without --tls-cert, else
// the certificate and key, loaded (so that a bad pair stops the start with
// a message; http.Server.ServeTLS would only fail in its goroutine), and
// with --tls-client-ca the CA bundle its clients' certificates must chain
// to.
func frontTLS(c *cli.Command) (*certReloader, error) {
	cert, key, ca := c.String("tls-cert"), c.String("tls-key"), c.String("tls-client-ca")
	if (cert != "") != (key != "") {
		return nil, usageError{errors.New("--tls-cert and --tls-key: expected both or neither")}
	}
	if cert == "" {
		if ca != "" {
			return nil, usageError{errors.New("--tls-client-ca: needs --tls-cert and --tls-key (client certificates are asked for in the TLS handshake: expected the router to serve HTTPS)")}
		}
		return nil, nil
	}
	r := &certReloader{cert: cert, key: key}
	if err := r.load(); err != nil {
		return nil, usageError{fmt.Errorf("%w: expected a PEM certificate and its private key", err)}
	}
	if ca != "" {
		pool, err := ha.CAPool(ca)
		if err != nil {
			return nil, usageError{fmt.Errorf("--tls-client-ca %s: %w: expected a PEM bundle of the CA certificates that sign the clients' certificates", ca, err)}
		}
		r.clientCAs = pool
	}
	return r, nil
}

// listenAndServe serves h on ln, with TLS when certs is set (frontTLS);
// it returns the server to shut down, and the function that ends its
// SIGHUP handling, to call when serve returns (after its drain). Until
// then SIGHUP reads the certificate and key again (a rotated certificate
// is served from the next handshake on; one that does not load is said on
// stderr and the old one kept), and without TLS is said and ignored: it
// never ends the router undrained. The client CA bundle is read once, at
// start.
func listenAndServe(certs *certReloader, ln net.Listener, h http.Handler, stderr io.Writer) (*http.Server, func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: api.ServerIdleTimeout}
	if certs != nil {
		srv.TLSConfig = &tls.Config{GetCertificate: certs.get}
		if certs.clientCAs != nil {
			// Every route, /health and /metrics included: the handshake
			// comes before the request names one.
			srv.TLSConfig.ClientAuth, srv.TLSConfig.ClientCAs = tls.RequireAndVerifyClientCert, certs.clientCAs
		}
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			if certs == nil {
				fmt.Fprintln(stderr, "narwhal-bench: SIGHUP: no --tls-cert to read again; ignored (SIGINT or SIGTERM stop the router)")
			} else if err := certs.load(); err != nil {
				fmt.Fprintf(stderr, "narwhal-bench: SIGHUP: %v; still serving the certificate loaded before\n", err)
			} else {
				fmt.Fprintf(stderr, "narwhal-bench: SIGHUP: read %s and %s again; new handshakes get them\n", certs.cert, certs.key)
			}
		}
	}()
	return srv, func() { signal.Stop(hup); close(done) }
}

// certReloader holds the TLS certificate the router serves, read again on
// SIGHUP, and the CAs its clients' certificates must chain to (nil: none
// asked for).
type certReloader struct {
	cert, key string
	cur       atomic.Pointer[tls.Certificate]
	clientCAs *x509.CertPool
}

// load reads the certificate and key; on an error the one loaded before
// stays.
func (r *certReloader) load() error {
	kp, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", r.cert, r.key, err)
	}
	r.cur.Store(&kp)
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.cur.Load(), nil }

// joinHA connects to etcd and waits, as a standby, for the leadership;
// then it fills cfg's epoch, fence and the split to resume. It returns a
// nil node when ctx ended first.
func joinHA(ctx context.Context, c *cli.Command, spec *fleet.Spec, cfg *live.Config, front *frontDoor, addr string, stderr io.Writer) (*ha.Node, error) {
	eps, err := ha.ParseEndpoints(c.String("ha"))
	if err != nil {
		return nil, usageError{fmt.Errorf("--ha: %w", err)}
	}
	lease, err := time.ParseDuration(c.String("ha-lease"))
	if err != nil || lease < time.Second {
		return nil, usageError{fmt.Errorf("--ha-lease %q: expected a duration of at least 1s", c.String("ha-lease"))}
	}
	tlsCfg, user, password, err := haSecurity(c)
	if err != nil {
		return nil, err
	}
	prefix := c.String("ha-prefix")
	if prefix == "" {
		prefix = "/narwhal-bench/" + spec.Name + "/"
	}
	var node *ha.Node
	var epoch uint64
	for first := true; ; first = false {
		if node, err = ha.Dial(ctx, ha.Config{Endpoints: eps, Prefix: prefix, Name: addr, Lease: lease,
			TLS: tlsCfg, Username: user, Password: password,
			Logf: func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }}); err != nil {
			if first || ctx.Err() != nil {
				return nil, err // etcd unreachable at start: say so
			}
			// A standby that lost etcd waits for it to come back: it
			// admits nothing, so it has nothing to stop.
			fmt.Fprintf(stderr, "narwhal-bench: ha: %v: trying again in %v\n", err, lease)
			select {
			case <-ctx.Done():
				return nil, nil
			case <-time.After(lease):
			}
			continue
		}
		front.set(standbyHandler(node))
		fmt.Fprintf(stderr, "narwhal-bench: ha: standby at %s (leader: %q)\n", addr, node.Leader(ctx))
		epoch, err = node.Campaign(ctx)
		if err == nil {
			break
		}
		node.Close()
		switch {
		case ctx.Err() != nil:
			return nil, nil
		case errors.Is(err, ha.ErrLostCampaigning):
			fmt.Fprintf(stderr, "narwhal-bench: ha: %v: joining again as a standby\n", err)
			continue
		}
		return nil, err
	}
	d, err := node.Latest(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "narwhal-bench: ha: %v: opening with the controller's split\n", err)
	} else if name := cfg.Controller.Name(); d != nil && d.State.Arm != "" && d.State.Arm != name {
		// Another controller's split (an earlier deployment's, say) is no
		// split to resume.
		fmt.Fprintf(stderr, "narwhal-bench: ha: the published state is the %s controller's, this router runs %s: opening with the controller's split\n", d.State.Arm, name)
	} else if d != nil {
		if cfg.Resume, err = live.ResumeFrom(d.State, spec.Names()); err != nil {
			fmt.Fprintf(stderr, "narwhal-bench: ha: %v: opening with the controller's split\n", err)
		}
	}
	cfg.Epoch, cfg.Fence = epoch, node.Admitting
	how := "the controller's opening split"
	if cfg.Resume != nil {
		how = fmt.Sprintf("the split published by %s (epoch %d, %d moves)", d.Leader, d.Epoch, d.State.Moves)
	}
	fmt.Fprintf(stderr, "narwhal-bench: ha: leader at %s, epoch %d, resuming %s\n", addr, epoch, how)
	return node, nil
}

func scheme(c *cli.Command) string {
	if c.String("tls-cert") != "" {
		return "https"
	}
	return "http"
}

// startingHandler answers while serve starts (connecting to etcd under
// --ha, before it stands by or leads): 503 with code starting on every
// route, /health included, so that whoever waits for a 200 waits on.
func startingHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		e := api.Unavailable("the router is starting", time.Second)
		e.Code = "starting"
		api.WriteError(w, e)
	})
}

// haName is the name a router campaigns under (the leader that /health
// names): its listen address, with the host's name for an unspecified
// host (--listen :8000), so that the name says where the leader is.
func haName(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			return net.JoinHostPort(h, port)
		}
	}
	return addr.String()
}
