// Package etcdtest starts a real etcd server (etcd's own server code,
// go.etcd.io/etcd/server/v3/embed) inside a test process, on loopback,
// for the high-availability tests. Nothing but tests imports it.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Start runs a one-member etcd in t's temporary directory until the test
// ends and returns its client address, HOST:PORT.
func Start(t testing.TB) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "nwb-test"
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "fatal" // its shutdown logs closed listeners as errors
	cu, pu := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, pu.String())
	run(t, cfg)
	return cu.Host
}

// run starts the etcd cfg configures and waits until it serves; it stops
// when the test ends.
func run(t testing.TB, cfg *embed.Config) {
	t.Helper()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal("etcd: not ready after 30 s")
	}
	t.Cleanup(e.Close)
}

func freeURL(t testing.TB) url.URL {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return url.URL{Scheme: "http", Host: ln.Addr().String()}
}
