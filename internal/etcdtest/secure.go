package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// Secure is an etcd serving TLS only, checking client certificates, with
// authentication on, as a production etcd runs.
type Secure struct {
	// Addr is its client address, HOST:PORT (https).
	Addr string
	// CA verifies its certificate and signed ClientCert/ClientKey, a
	// client certificate whose common name is no etcd user, and
	// UserCert/UserKey, one whose common name is User (etcd then takes
	// that name as the user, with no password).
	CA, ClientCert, ClientKey string
	UserCert, UserKey         string
	// OtherCA is a CA that signed nothing etcd trusts.
	OtherCA string
	// User and Password may read and write under Prefix, and nothing else.
	User, Password, Prefix string
}

// StartSecure runs a one-member etcd in t's temporary directory as Start
// does, with TLS (certificates made here, PEM files under the temporary
// directory), client certificates checked, and authentication on: root
// and a user with read and write under /narwhal-bench/.
func StartSecure(t testing.TB) Secure {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t, dir, "ca")
	newCA(t, dir, "other-ca")
	srvCert, srvKey := issue(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth, "etcd-server")
	cliCert, cliKey := issue(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth, "nwb-client")
	userCert, userKey := issue(t, dir, "user-client", ca, caKey, x509.ExtKeyUsageClientAuth, "router")
	s := Secure{CA: filepath.Join(dir, "ca.pem"), ClientCert: cliCert, ClientKey: cliKey, UserCert: userCert, UserKey: userKey,
		OtherCA: filepath.Join(dir, "other-ca.pem"), User: "router", Password: "router-secret", Prefix: "/narwhal-bench/"}

	cfg := embed.NewConfig()
	cfg.Name = "nwb-test-tls"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.LogLevel = "fatal"
	cu, pu := freeURL(t), freeURL(t)
	cu.Scheme = "https"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, pu.String())
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: s.CA, ClientCertAuth: true}
	// bcrypt's cheapest cost: each password check (every login) is then
	// microseconds, not the default's tens of milliseconds, which under the
	// race detector on a loaded machine ran past a client's dial timeout.
	cfg.BcryptCost = 4
	run(t, cfg)
	s.Addr = cu.Host

	// Users, a role for the routers' prefix, then authentication on.
	tlsCfg, err := transport.TLSInfo{CertFile: cliCert, KeyFile: cliKey, TrustedCAFile: s.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + s.Addr}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-secret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "narwhal"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "narwhal", s.Prefix, clientv3.GetPrefixRangeEnd(s.Prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, s.User, s.Password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, s.User, "narwhal"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth setup, step %d: %v", i, err)
		}
	}
	return s
}

// newCA writes a self-signed CA certificate to dir/name.pem.
func newCA(t testing.TB, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// issue writes a certificate for 127.0.0.1 and localhost, signed by ca,
// and its key, to dir/name.pem and dir/name-key.pem.
func issue(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

// ServerCert writes a server certificate for 127.0.0.1 and localhost,
// signed by a CA of its own (dir/name-ca.pem), and its key to dir/name.pem
// and dir/name-key.pem, and returns them with the certificate's serial
// number (tests of a TLS server other than etcd use it too).
func ServerCert(t testing.TB, dir, name string) (certFile, keyFile string, serial *big.Int) {
	t.Helper()
	ca, caKey := newCA(t, dir, name+"-ca")
	certFile, keyFile = issue(t, dir, name, ca, caKey, x509.ExtKeyUsageServerAuth, name)
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert.SerialNumber
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClientCert writes a client certificate signed by a CA of its own
// (dir/name-ca.pem, returned as caFile), and its key to dir/name.pem and
// dir/name-key.pem: for a TLS server that checks its clients.
func ClientCert(t testing.TB, dir, name string) (caFile, certFile, keyFile string) {
	t.Helper()
	ca, caKey := newCA(t, dir, name+"-ca")
	certFile, keyFile = issue(t, dir, name, ca, caKey, x509.ExtKeyUsageClientAuth, name)
	return filepath.Join(dir, name+"-ca.pem"), certFile, keyFile
}
