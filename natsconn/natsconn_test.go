package natsconn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
)

// serve starts an embedded server with the configuration text conf.
func serve(t *testing.T, conf string) *server.Server {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, ConfigFile: path, StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func write(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// roundTrip checks that nc can publish and receive.
func roundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.SubscribeSync("probe")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("probe", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func connect(t *testing.T, c natsconn.Config) *nats.Conn {
	t.Helper()
	nc, err := c.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	roundTrip(t, nc)
	return nc
}

func refused(t *testing.T, c natsconn.Config, want string) {
	t.Helper()
	nc, err := c.Connect("test", nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("a wrong secret connected")
	}
	if !strings.Contains(err.Error(), "refused the login") || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say the login was refused with %s", err, want)
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong") && !strings.Contains(want, "wrong") {
		t.Fatalf("error %q shows the secret", err)
	}
}

func TestUserPassword(t *testing.T) {
	s := serve(t, `authorization { users = [{user: alice, password: "s3cret"}] }`)
	connect(t, natsconn.Config{URLs: s.ClientURL(), User: "alice", Password: "s3cret"})
	refused(t, natsconn.Config{URLs: s.ClientURL(), User: "alice", Password: "nope"}, `user "alice"`)
	// Credentials in the URL keep working, and are not repeated in errors.
	u := strings.Replace(s.ClientURL(), "nats://", "nats://alice:s3cret@", 1)
	connect(t, natsconn.Config{URLs: u})
	bad := strings.Replace(s.ClientURL(), "nats://", "nats://alice:s3cretX@", 1)
	refused(t, natsconn.Config{URLs: bad}, "the credentials in the URL")
}

func TestToken(t *testing.T) {
	s := serve(t, `authorization { token: "s3cret" }`)
	connect(t, natsconn.Config{URLs: s.ClientURL(), Token: "s3cret"})
	// The nats CLI passes a token as a user without a password.
	connect(t, natsconn.Config{URLs: s.ClientURL(), User: "s3cret"})
	refused(t, natsconn.Config{URLs: s.ClientURL(), Token: "other"}, "a token")
	refused(t, natsconn.Config{URLs: s.ClientURL()}, "no credentials")
}

func TestNKey(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	s := serve(t, fmt.Sprintf(`authorization { users = [{nkey: %q}] }`, pub))
	connect(t, natsconn.Config{URLs: s.ClientURL(), NKey: write(t, "user.nk", seed)})
	other, _ := nkeys.CreateUser()
	oseed, _ := other.Seed()
	refused(t, natsconn.Config{URLs: s.ClientURL(), NKey: write(t, "other.nk", oseed)}, "the nkey seed file")
	if _, err := (natsconn.Config{URLs: s.ClientURL(), NKey: write(t, "bad.nk", []byte("not a seed"))}).Connect("t"); err == nil || !strings.Contains(err.Error(), "--nkey") {
		t.Fatalf("a bad seed file: %v", err)
	}
}

// TestCreds runs a server in operator mode (decentralised JWT) with an
// account and a user made here, and connects with the user's creds file.
func TestCreds(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "TOOLBUS"
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	sjwt, err := sc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	creds := func(akp nkeys.KeyPair, apub string) string {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		useed, _ := ukp.Seed()
		uc := jwt.NewUserClaims(upub)
		uc.IssuerAccount = apub
		ujwt, err := uc.Encode(akp)
		if err != nil {
			t.Fatal(err)
		}
		b, err := jwt.FormatUserConfig(ujwt, useed)
		if err != nil {
			t.Fatal(err)
		}
		return write(t, "user.creds", b)
	}
	opFile := write(t, "op.jwt", []byte(ojwt))
	s := serve(t, fmt.Sprintf("operator: %q\nsystem_account: %q\nresolver: MEMORY\nresolver_preload: {%s: %q, %s: %q}\n",
		opFile, spub, apub, ajwt, spub, sjwt))
	connect(t, natsconn.Config{URLs: s.ClientURL(), Creds: creds(akp, apub)})
	// A user signed by an account the server does not know is refused.
	bkp, _ := nkeys.CreateAccount()
	bpub, _ := bkp.PublicKey()
	refused(t, natsconn.Config{URLs: s.ClientURL(), Creds: creds(bkp, bpub)}, "the credentials file")
}

// pki makes a CA and a certificate it signs (server or client).
type pki struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	pem  []byte
}

func newCA(t *testing.T) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolbus test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &pki{key: key, cert: cert, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns the PEM files of a certificate for 127.0.0.1 signed by ca.
func (ca *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return write(t, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		write(t, name+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
}

func TestTLS(t *testing.T) {
	ca := newCA(t)
	caFile := write(t, "ca.pem", ca.pem)
	scert, skey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	ccert, ckey := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	s := serve(t, fmt.Sprintf("tls {cert_file: %q, key_file: %q, ca_file: %q, verify: true}\n", scert, skey, caFile))
	connect(t, natsconn.Config{URLs: s.ClientURL(), CA: caFile, Cert: ccert, Key: ckey})
	// Without the client certificate the server refuses; without the CA
	// the client does not trust the server.
	for name, c := range map[string]natsconn.Config{
		"no client cert": {URLs: s.ClientURL(), CA: caFile},
		"no CA":          {URLs: strings.Replace(s.ClientURL(), "nats://", "tls://", 1), Cert: ccert, Key: ckey},
	} {
		nc, err := c.Connect("t", nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected", name)
		}
	}
	if _, err := (natsconn.Config{URLs: s.ClientURL(), Cert: ccert}).Connect("t"); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Fatalf("a certificate without its key: %v", err)
	}
}

// TestEnvAndFlags: the nats CLI's environment variables are read, and a
// flag overrides its variable.
func TestEnvAndFlags(t *testing.T) {
	s := serve(t, `authorization { users = [{user: alice, password: "s3cret"}, {user: bob, password: "b0b"}] }`)
	t.Setenv("NATS_URL", s.ClientURL())
	t.Setenv("NATS_USER", "alice")
	t.Setenv("NATS_PASSWORD", "s3cret")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX.alice")
	c := natsconn.FromEnv()
	nc := connect(t, c)
	if !strings.HasPrefix(nc.NewRespInbox(), "_INBOX.alice.") {
		t.Fatalf("inbox %s ignores NATS_INBOX_PREFIX", nc.NewRespInbox())
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--user", "bob", "--password", "b0b"}); err != nil {
		t.Fatal(err)
	}
	if c.URLs != s.ClientURL() || c.User != "bob" {
		t.Fatalf("flags over env: %+v", c)
	}
	connect(t, c)
	var usage strings.Builder
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	if strings.Contains(usage.String(), "s3cret") || strings.Contains(usage.String(), "b0b") {
		t.Fatalf("usage shows a secret:\n%s", usage.String())
	}
	// Several URLs, the first one dead, still connect.
	connect(t, natsconn.Config{URLs: "nats://127.0.0.1:1," + s.ClientURL(), User: "alice", Password: "s3cret"})
}

func TestCheck(t *testing.T) {
	for _, c := range []natsconn.Config{
		{Token: "a", User: "b"},
		{Creds: "x", NKey: "y"},
		{Password: "p"},
		{Key: "k"},
		{Creds: "/does/not/exist"},
		{InboxPrefix: "_INBOX.>"},
	} {
		if err := c.Check(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (natsconn.Config{}).Check(); err != nil {
		t.Fatal(err)
	}
	if err := (natsconn.Config{Token: "a", User: "b"}).Check(); !strings.Contains(err.Error(), "choose one way to log in") {
		t.Fatal(err)
	}
}

func TestRedact(t *testing.T) {
	got := natsconn.Redact("nats://u:pw@h1:4222,nats://tok@h2:4222,nats://h3:4222")
	if strings.Contains(got, "pw") || strings.Contains(got, "tok") || !strings.Contains(got, "h3") {
		t.Fatal(got)
	}
}

// TestConnectWait: a process started before its server waits for it, and
// connects once it is up; a refused login does not wait.
func TestConnectWait(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing listens on port until the server starts below
	var logs testkit.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	done := make(chan error, 1)
	go func() {
		nc, err := natsconn.Config{URLs: fmt.Sprintf("nats://127.0.0.1:%d", port), User: "u", Password: "p"}.ConnectWait(t.Context(), "waiter", log)
		if err == nil {
			nc.Close()
		}
		done <- err
	}()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if !strings.Contains(logs.String(), "waiting for NATS") {
			return errors.New("not waiting yet")
		}
		return nil
	})
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "u", Password: "p"}}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	defer s.Shutdown()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ConnectWait did not connect after the server started")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := (natsconn.Config{URLs: fmt.Sprintf("nats://127.0.0.1:%d", port), User: "x", Password: "y"}).ConnectWait(ctx, "bad", log); err == nil {
		t.Fatal("connected without the server's credentials")
	}
}
