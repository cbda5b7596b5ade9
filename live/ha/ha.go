// Package ha runs routers active-passive on etcd: one leader admits
// requests, standbys wait, and a standby takes over, resuming the
// leader's split, when the leader's lease expires.
//
// The election is etcd's own (client/v3/concurrency): a candidate holds a
// key under the election prefix, attached to its lease, and the oldest key
// leads. The epoch is the leader key's creation revision: every leader has
// a higher one than the one before it, and the router writes it into
// every journal record.
//
// Never two leaders admitting: the leader fences itself. It renews its
// lease with its own keep-alives and notes, for each, the time it sent
// it; etcd cannot expire the lease before send + TTL, so the leader stops
// admitting at send + TTL - Margin by its own monotonic clock, whether or
// not it still hears from etcd. A standby is elected only once the old
// key is gone, that is once the lease has expired on the server, after
// that instant.
package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/narwhal-bench/narwhal-bench/live"
)

// Config configures a Node.
type Config struct {
	// Endpoints are etcd's client URLs (http://HOST:PORT).
	Endpoints []string
	// Prefix is this router group's key prefix, e.g. /narwhal-bench/demo/.
	// Routers of one fleet share it; nothing else should write under it.
	Prefix string
	// Name identifies this router in the election (its address).
	Name string
	// Lease is the leader lease (default 2 s; etcd counts whole seconds,
	// so it is rounded up to one).
	Lease time.Duration
	// Margin is how long before its lease could expire the leader stops
	// admitting (default Lease/10).
	Margin time.Duration
	// DialTimeout bounds reaching etcd (default 5 s).
	DialTimeout time.Duration
	// TLS, when set, reaches etcd over https:// with it: the roots that
	// verify etcd's certificate and, where etcd asks for one
	// (--client-cert-auth), this router's client certificate. Nil is plain
	// http://.
	TLS *tls.Config
	// Username and Password log in to an etcd with authentication on (etcd
	// auth enable); both or neither. With neither, an etcd that checks
	// client certificates takes the certificate's common name as the user.
	Username, Password string
	// Logf, when set, receives the node's operational lines (the state's
	// publication failing, and working again); nil discards them.
	Logf func(format string, args ...any)
}

// TLSConfig builds Config.TLS from PEM files: caFile holds the roots that
// verify etcd's certificate ("" for the system's), certFile and keyFile
// this router's client certificate and key (both or neither).
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := CAPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// CAPool reads a PEM bundle of CA certificates (the roots that verify a
// server's certificate, or a TLS server's clients'); a file without any is
// an error.
func CAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

// ParseEndpoints reads --ha's value: etcd://HOST:PORT[,HOST:PORT...] (each
// element may repeat the scheme); it returns http:// client URLs.
func ParseEndpoints(s string) ([]string, error) {
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		return nil, fmt.Errorf("%q: expected etcd://HOST:PORT[,HOST:PORT...]", s)
	}
	var out []string
	for _, hp := range strings.Split(rest, ",") {
		hp = strings.TrimPrefix(strings.TrimSpace(hp), "etcd://")
		u, err := url.Parse("http://" + hp)
		if hp == "" || err != nil || u.Host != hp || u.Port() == "" {
			return nil, fmt.Errorf("%q: endpoint %q: expected HOST:PORT", s, hp)
		}
		out = append(out, "http://"+hp)
	}
	return out, nil
}

// why explains a timeout reaching etcd: etcd's client retries a refused
// TLS handshake until its deadline and then reports only the deadline.
// One direct connection to the first endpoint says what failed; "" when
// err is no timeout or the probe finds nothing wrong.
func why(err error, cfg Config) string {
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		return ""
	}
	host := cfg.Endpoints[0]
	if _, rest, ok := strings.Cut(host, "://"); ok {
		host = rest
	}
	timeout := min(cfg.DialTimeout, 2*time.Second)
	raw, derr := net.DialTimeout("tcp", host, timeout)
	if derr != nil {
		return fmt.Sprintf(" (%s: %v)", host, derr)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(timeout))
	if cfg.TLS == nil {
		// Does it answer a TLS hello? Then it wants TLS.
		if tls.Client(raw, &tls.Config{InsecureSkipVerify: true}).Handshake() == nil {
			return fmt.Sprintf(" (%s serves TLS: give the CA that signed its certificate, --ha-cacert)", host)
		}
		return ""
	}
	tcfg := cfg.TLS.Clone()
	if tcfg.ServerName == "" {
		tcfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	conn := tls.Client(raw, tcfg)
	if herr := conn.Handshake(); herr != nil {
		return fmt.Sprintf(" (TLS to %s: %v)", host, herr)
	}
	// Under TLS 1.3 a server refuses a client certificate after the
	// handshake, in its first record.
	_ = conn.SetReadDeadline(time.Now().Add(timeout / 2))
	if _, rerr := conn.Read(make([]byte, 1)); rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
		return fmt.Sprintf(" (TLS to %s: %v)", host, rerr)
	}
	return ""
}

// Node is one router's membership in the group.
type Node struct {
	cfg  Config
	cli  *clientv3.Client
	sess *concurrency.Session
	el   *concurrency.Election
	base time.Time
	// validUntil is the fence: nanoseconds since base (monotonic) until
	// which this node's lease surely holds on the server.
	validUntil atomic.Int64
	leader     atomic.Bool
	epoch      atomic.Uint64
	lost       chan struct{}
	lostOnce   sync.Once
	cancel     context.CancelFunc
	// mu serialises the election's own state (etcd's Election is not safe
	// for concurrent use): Campaign holds it while it campaigns, Close
	// while it resigns; key and rev are the leader key this node won,
	// which Publish fences its writes on.
	mu       sync.Mutex
	key      string
	rev      int64
	closing  chan struct{}
	closed   sync.Once
	closeErr error
}

// Dial connects to etcd and opens this node's lease (not yet a candidate).
func Dial(ctx context.Context, cfg Config) (*Node, error) {
	if len(cfg.Endpoints) == 0 || cfg.Prefix == "" || cfg.Name == "" {
		return nil, errors.New("ha: expected endpoints, a prefix and a name")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 2 * time.Second
	}
	cfg.Lease = max(cfg.Lease.Round(time.Second), time.Second)
	if cfg.Margin <= 0 {
		cfg.Margin = cfg.Lease / 10
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("ha: an etcd user needs both a name and a password")
	}
	eps := cfg.Endpoints
	if cfg.TLS != nil {
		// etcd's client speaks TLS only to https:// endpoints.
		eps = make([]string, len(cfg.Endpoints))
		for i, ep := range cfg.Endpoints {
			eps[i] = "https://" + strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
		}
		cfg.Endpoints = eps
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: cfg.DialTimeout,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		TLS: cfg.TLS, Username: cfg.Username, Password: cfg.Password,
		// Dial's own errors say what failed; the client's retries would
		// log each attempt as JSON on the router's stderr.
		Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("ha: etcd %v: %w%s", cfg.Endpoints, err, why(err, cfg))
	}
	n := &Node{cfg: cfg, cli: cli, base: time.Now(), lost: make(chan struct{}), closing: make(chan struct{})}
	gctx, gcancel := context.WithTimeout(ctx, cfg.DialTimeout)
	sent := n.now()
	lease, err := cli.Grant(gctx, int64(cfg.Lease/time.Second))
	gcancel()
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("ha: etcd %v: lease: %w%s", cfg.Endpoints, err, why(err, cfg))
	}
	n.renewed(sent, lease.TTL)
	// The TTL bounds Session.Close's revoke (its default, 60 s, would hold
	// a stopping router that long when etcd is unreachable): a lease
	// revoked after its TTL has expired anyway.
	n.sess, err = concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(max(lease.TTL, 1))))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("ha: session: %w", err)
	}
	n.el = concurrency.NewElection(n.sess, cfg.Prefix+"election")
	kctx, kcancel := context.WithCancel(context.Background())
	n.cancel = kcancel
	go n.keepFence(kctx, lease.ID)
	return n, nil
}

func (n *Node) now() time.Duration { return time.Since(n.base) }

// renewed moves the fence after a keep-alive sent at sent was answered
// with ttl seconds.
func (n *Node) renewed(sent time.Duration, ttl int64) {
	if ttl <= 0 {
		return
	}
	until := int64(sent + time.Duration(ttl)*time.Second - n.cfg.Margin)
	for {
		old := n.validUntil.Load()
		if until <= old || n.validUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// keepFence renews the lease four times per lease period and moves the
// fence; when the fence lapses or the session ends, leadership is lost.
func (n *Node) keepFence(ctx context.Context, id clientv3.LeaseID) {
	t := time.NewTicker(n.cfg.Lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.sess.Done():
			n.lose()
			return
		case <-t.C:
		}
		sent := n.now()
		kctx, cancel := context.WithTimeout(ctx, n.cfg.Lease/2)
		resp, err := n.cli.KeepAliveOnce(kctx, id)
		cancel()
		if err == nil {
			n.renewed(sent, resp.TTL)
		}
		if n.now() >= time.Duration(n.validUntil.Load()) || errors.Is(err, rpctypes.ErrLeaseNotFound) {
			n.lose()
			return
		}
	}
}

// lose ends leadership (or candidacy) for good.
func (n *Node) lose() {
	n.lostOnce.Do(func() {
		n.leader.Store(false)
		close(n.lost)
	})
}

// ErrLostCampaigning is Campaign's error when the node's lease lapsed
// while it waited (etcd unreachable for a lease): the node never led, so
// a new one may campaign again.
var ErrLostCampaigning = errors.New("ha: lease lost while campaigning")

// Campaign blocks until this node leads, and returns its epoch. Close
// ends a campaign in progress.
func (n *Node) Campaign(ctx context.Context) (uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-n.lost:
			cancel()
		case <-n.closing:
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := n.el.Campaign(cctx, n.cfg.Name); err != nil {
		if n.Lost() {
			return 0, ErrLostCampaigning
		}
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			return 0, fmt.Errorf("ha: campaign: %w (the etcd user, or with none the client certificate's common name, may not write under %s)", err, n.cfg.Prefix)
		}
		return 0, fmt.Errorf("ha: campaign: %w", err)
	}
	n.key, n.rev = n.el.Key(), n.el.Rev()
	n.epoch.Store(uint64(n.rev))
	n.leader.Store(true)
	return uint64(n.rev), nil
}

// Admitting is the fence the router asks before each admission: true
// while this node leads and its lease surely holds.
func (n *Node) Admitting() bool {
	return n.leader.Load() && n.now() < time.Duration(n.validUntil.Load())
}

// Epoch is the epoch this node leads under (0 before it leads).
func (n *Node) Epoch() uint64 { return n.epoch.Load() }

// Done is closed when this node lost its lease: a leader must then stop.
func (n *Node) Done() <-chan struct{} { return n.lost }

// Lost reports whether Done is closed.
func (n *Node) Lost() bool {
	select {
	case <-n.lost:
		return true
	default:
		return false
	}
}

// Doc is what a leader publishes under Prefix+"state" and a standby
// resumes from.
type Doc struct {
	Version    int    `json:"version"`
	Epoch      uint64 `json:"epoch"`
	Leader     string `json:"leader"`
	AtUnixNano int64  `json:"at_unix_nano"`
	// State is the leader's GET /state at that instant: split, engines
	// with their roles and process generations, moves, counts.
	State live.State `json:"state"`
}

// DocVersion is Doc's format version.
const DocVersion = 1

func (n *Node) stateKey() string { return n.cfg.Prefix + "state" }

// Publish writes s for standbys, only while this node's election key
// still stands (a deposed leader's write is refused by etcd).
func (n *Node) Publish(ctx context.Context, s live.State) error {
	n.mu.Lock()
	key, rev := n.key, n.rev
	n.mu.Unlock()
	if key == "" {
		return errors.New("ha: publish: not the leader")
	}
	s = withoutCredentials(s)
	doc, err := json.Marshal(Doc{Version: DocVersion, Epoch: uint64(rev), Leader: n.cfg.Name, AtUnixNano: time.Now().UnixNano(), State: s})
	if err != nil {
		return err
	}
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpPut(n.stateKey(), string(doc))).Commit()
	if err != nil {
		return fmt.Errorf("ha: publish: %w", err)
	}
	if !resp.Succeeded {
		n.lose()
		return errors.New("ha: publish: no longer the leader")
	}
	return nil
}

// withoutCredentials is s with any user and password taken out of its
// engines' URLs: /state shows them to admins only, and etcd is no place
// for them.
func withoutCredentials(s live.State) live.State {
	engines := make([]live.EngineState, len(s.Engines))
	copy(engines, s.Engines)
	for i := range engines {
		if u, err := url.Parse(engines[i].URL); err == nil && u.User != nil {
			u.User = nil
			engines[i].URL = u.String()
		}
	}
	s.Engines = engines
	return s
}

// Latest reads the last published Doc (nil when none).
func (n *Node) Latest(ctx context.Context) (*Doc, error) {
	resp, err := n.cli.Get(ctx, n.stateKey())
	if err != nil {
		return nil, fmt.Errorf("ha: read state: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return decodeDoc(resp.Kvs[0].Value)
}

// decodeDoc reads a published Doc.
func decodeDoc(b []byte) (*Doc, error) {
	var d Doc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("ha: published state: %w", err)
	}
	if d.Version != DocVersion {
		return nil, fmt.Errorf("ha: published state: version %d: expected version %d", d.Version, DocVersion)
	}
	return &d, nil
}

// Leader names the current leader ("" when none).
func (n *Node) Leader(ctx context.Context) string {
	resp, err := n.el.Leader(ctx)
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// publishHealth follows the leader's publications: a standby that takes
// over resumes the last state published, so a leader that cannot publish
// says so, once, and again when it can, and an operator knows how stale a
// takeover would be.
type publishHealth struct{ failing time.Time } // zero: publishing works

// note takes one publication's outcome at now and returns the line to
// log ("" for none).
func (p *publishHealth) note(err error, now time.Time) string {
	switch {
	case err != nil && p.failing.IsZero():
		p.failing = now
		return fmt.Sprintf("narwhal-bench: ha: publishing the router's state failed (%v): a standby taking over now resumes the state last published", err)
	case err == nil && !p.failing.IsZero():
		line := fmt.Sprintf("narwhal-bench: ha: publishing the router's state works again, after %v", now.Sub(p.failing).Round(time.Millisecond))
		p.failing = time.Time{}
		return line
	}
	return ""
}

func (n *Node) logf(format string, args ...any) {
	if n.cfg.Logf != nil {
		n.cfg.Logf(format, args...)
	}
}

// PublishEvery publishes the router's state every period until ctx ends
// or the lease is lost; it publishes once at once, so a standby that takes
// over a moment later resumes this leader's opening split.
func (n *Node) PublishEvery(ctx context.Context, rt *live.Router, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var health publishHealth
	for {
		if s, ok := rt.State(); ok {
			pctx, cancel := context.WithTimeout(ctx, period)
			err := n.Publish(pctx, s)
			cancel()
			if ctx.Err() == nil {
				if line := health.note(err, time.Now()); line != "" {
					n.logf("%s", line)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-n.lost:
			return
		case <-t.C:
		}
	}
}

// Close ends a campaign in progress, resigns (a standby then takes over
// at once, without waiting for the lease) and closes the connection. It
// is safe while Publish or PublishEvery still run (their writes then
// fail), and to call more than once (the first call does the work).
func (n *Node) Close() error {
	n.closed.Do(func() {
		n.leader.Store(false)
		n.cancel()
		close(n.closing)
		n.mu.Lock()
		defer n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if n.key != "" {
			_ = n.el.Resign(ctx)
		}
		_ = n.sess.Close()
		n.closeErr = n.cli.Close()
	})
	return n.closeErr
}
