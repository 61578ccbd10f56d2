// Package natsconn connects to NATS with the URLs, credentials and TLS of the
// nats CLI's environment variables, overridden by flags. It depends on
// nats.go only.
//
//	cfg := natsconn.FromEnv()
//	cfg.RegisterFlags(fs) // --nats --creds --nkey --user --password --token --tls-ca --tls-cert --tls-key --inbox-prefix
//	fs.Parse(args)
//	nc, err := cfg.Connect("my-agent")
package natsconn

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The environment variables read by FromEnv. All but NATS_TOKEN and
// NATS_INBOX_PREFIX are the nats CLI's own.
const (
	EnvURL         = "NATS_URL"
	EnvCreds       = "NATS_CREDS"
	EnvNKey        = "NATS_NKEY"
	EnvUser        = "NATS_USER"
	EnvPassword    = "NATS_PASSWORD"
	EnvToken       = "NATS_TOKEN"
	EnvCA          = "NATS_CA"
	EnvCert        = "NATS_CERT"
	EnvKey         = "NATS_KEY"
	EnvInboxPrefix = "NATS_INBOX_PREFIX"
)

// DefaultURL is the URL when neither --nats nor $NATS_URL says otherwise:
// the router's embedded server.
const DefaultURL = nats.DefaultURL

// Config is where and how to connect. The zero value connects to
// DefaultURL without credentials.
type Config struct {
	// URLs is one server URL or several, comma-separated; credentials in a
	// URL work as with nats.go.
	URLs string
	// Creds is a JWT credentials file (decentralised authentication).
	Creds string
	// NKey is a file holding a user nkey seed (SU...).
	NKey string
	// User and Password log in with a user name and password. A User
	// without a Password is a token, as the nats CLI treats it.
	User, Password string
	// Token logs in with an authorization token.
	Token string
	// CA is a PEM file of the certificate authorities that sign the
	// server's certificate; Cert and Key are the client certificate and
	// its key (PEM) for servers that verify clients. Any of them turns TLS on.
	CA, Cert, Key string
	// InboxPrefix replaces _INBOX for this connection's reply subjects; a
	// secured deployment gives each role its own (docs/security.md).
	InboxPrefix string
	// Name is the connection name the server shows (nats server report
	// connections); Connect's argument when empty.
	Name string
}

// FromEnv returns the configuration the environment variables give.
func FromEnv() Config {
	return Config{
		URLs: os.Getenv(EnvURL), Creds: os.Getenv(EnvCreds), NKey: os.Getenv(EnvNKey),
		User: os.Getenv(EnvUser), Password: os.Getenv(EnvPassword), Token: os.Getenv(EnvToken),
		CA: os.Getenv(EnvCA), Cert: os.Getenv(EnvCert), Key: os.Getenv(EnvKey),
		InboxPrefix: os.Getenv(EnvInboxPrefix),
	}
}

// RegisterFlags defines --nats and the credential flags on fs, with c's
// current values (typically FromEnv's) as their defaults, so a flag
// overrides its environment variable. Secrets are never shown as defaults
// in the usage text. It leaves out the flags named in skip, for a command
// that uses one of the names for something else (toolbus's --user is the
// toolbus user); --nats-user, always defined, is the same as --user.
func (c *Config) RegisterFlags(fs *flag.FlagSet, skip ...string) {
	c.URLs = cmp.Or(c.URLs, DefaultURL)
	fs.StringVar(&c.URLs, "nats", c.URLs, "NATS server URL, or several comma-separated; $NATS_URL when set, else "+DefaultURL)
	c.registerAuth(fs, skip)
}

// RegisterAuthFlags defines RegisterFlags' flags but --nats on fs, for a
// command that chooses its URL itself.
func (c *Config) RegisterAuthFlags(fs *flag.FlagSet) { c.registerAuth(fs, nil) }

func (c *Config) registerAuth(fs *flag.FlagSet, skip []string) {
	str := func(p *string, name, usage string) {
		if !slices.Contains(skip, name) {
			fs.StringVar(p, name, *p, usage)
		}
	}
	secret := func(p *string, name, usage string) { // its default is never shown
		if !slices.Contains(skip, name) {
			fs.Var(secretValue{p}, name, usage)
		}
	}
	str(&c.Creds, "creds", "JWT user credentials file ($NATS_CREDS)")
	str(&c.NKey, "nkey", "user nkey seed file ($NATS_NKEY)")
	str(&c.User, "user", "NATS user name; without --password it is a token ($NATS_USER)")
	natsUser := "the same as --user"
	if slices.Contains(skip, "user") { // this command's --user is its own
		natsUser = "NATS user name; without --password it is a token ($NATS_USER)"
	}
	str(&c.User, "nats-user", natsUser)
	secret(&c.Password, "password", "password of the NATS user ($NATS_PASSWORD)")
	secret(&c.Token, "token", "authorization token ($NATS_TOKEN)")
	str(&c.CA, "tls-ca", "PEM file of the CAs that sign the server's certificate; turns TLS on ($NATS_CA)")
	str(&c.Cert, "tls-cert", "client certificate PEM file, with --tls-key ($NATS_CERT)")
	str(&c.Key, "tls-key", "client certificate key PEM file ($NATS_KEY)")
	str(&c.InboxPrefix, "inbox-prefix", "prefix of this connection's reply subjects instead of _INBOX, as a secured deployment's role requires ($NATS_INBOX_PREFIX)")
}

// secretValue is a string flag whose default is not printed.
type secretValue struct{ p *string }

func (s secretValue) String() string {
	if s.p == nil || *s.p == "" {
		return ""
	}
	return "(set)"
}
func (s secretValue) Set(v string) error { *s.p = v; return nil }

// Servers returns the configured URLs, DefaultURL when none.
func (c Config) Servers() string {
	if strings.TrimSpace(c.URLs) == "" {
		return DefaultURL
	}
	return c.URLs
}

// Check reports a configuration that cannot work: two ways of logging in
// at once, a certificate without its key, or a file that cannot be read.
func (c Config) Check() error {
	var ways []string
	for _, w := range [...]struct{ flag, v string }{{"--creds", c.Creds}, {"--nkey", c.NKey}, {"--user", c.User}, {"--token", c.Token}} {
		if w.v != "" {
			ways = append(ways, w.flag)
		}
	}
	if len(ways) > 1 {
		return fmt.Errorf("natsconn: %s given together: choose one way to log in", strings.Join(ways, " and "))
	}
	if c.Password != "" && c.User == "" {
		return errors.New("natsconn: --password without --user")
	}
	if (c.Cert == "") != (c.Key == "") {
		return errors.New("natsconn: --tls-cert and --tls-key go together")
	}
	for _, f := range []struct{ flag, path string }{{"--creds", c.Creds}, {"--nkey", c.NKey}, {"--tls-ca", c.CA}, {"--tls-cert", c.Cert}, {"--tls-key", c.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("natsconn: %s %s: %w", f.flag, f.path, err)
		}
	}
	if p := c.InboxPrefix; p != "" && (strings.ContainsAny(p, "*> \t\r\n") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..")) {
		return fmt.Errorf("natsconn: inbox prefix %q is not a subject without wildcards", p)
	}
	return nil
}

// Options returns the nats.go options of c (credentials, TLS, inbox
// prefix, name), for a caller that adds its own and connects itself.
func (c Config) Options(name string) ([]nats.Option, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	name = cmp.Or(c.Name, name)
	var opts []nats.Option
	if name != "" {
		opts = append(opts, nats.Name(name))
	}
	switch {
	case c.Creds != "":
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.NKey != "":
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("natsconn: --nkey %s: %w", c.NKey, err)
		}
		opts = append(opts, o)
	case c.User != "" && c.Password != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.User != "":
		opts = append(opts, nats.Token(c.User))
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	}
	if c.CA != "" {
		opts = append(opts, nats.RootCAs(c.CA))
	}
	if c.Cert != "" {
		opts = append(opts, nats.ClientCert(c.Cert, c.Key))
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	return opts, nil
}

// Connect dials the servers with c and extra options (which come last, so
// they win). name is the connection name unless c.Name is set. A refused
// login is reported as such, saying which credentials were used (never the
// secret).
func (c Config) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.Options(name)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.Servers(), append(opts, extra...)...)
	if err != nil {
		return nil, c.explain(err)
	}
	return nc, nil
}

// ConnectWait is Connect retrying (logged once, pauses up to 2 s) while no
// server answers, until ctx ends; other failures return at once.
func (c Config) ConnectWait(ctx context.Context, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	pause := 100 * time.Millisecond
	for logged := false; ; {
		nc, err := c.Connect(name, extra...)
		if err == nil || !errors.Is(err, nats.ErrNoServers) {
			if err == nil && logged && log != nil {
				log.Info("connected to NATS", "url", Redact(nc.ConnectedUrl()))
			}
			return nc, err
		}
		if !logged && log != nil {
			log.Info("waiting for NATS", "servers", Redact(c.Servers()), "error", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up waiting: %w)", err, context.Cause(ctx))
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func (c Config) explain(err error) error {
	where := Redact(c.Servers())
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return fmt.Errorf("connect %s: the server refused the login with %s: %w", where, c.describe(), err)
	case strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "tls"):
		return fmt.Errorf("connect %s: TLS failed (check --tls-ca, --tls-cert, --tls-key and that the URL is the server's name): %w", where, err)
	}
	return fmt.Errorf("connect %s: %w", where, err)
}

// describe names the credentials in use, for an error message.
func (c Config) describe() string {
	switch {
	case c.Creds != "":
		return "the credentials file " + c.Creds
	case c.NKey != "":
		return "the nkey seed file " + c.NKey
	case c.User != "" && c.Password != "":
		return fmt.Sprintf("user %q and its password", c.User)
	case c.User != "", c.Token != "":
		return "a token"
	}
	for _, u := range strings.Split(c.Servers(), ",") {
		if pu, err := url.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			return "the credentials in the URL"
		}
	}
	return "no credentials (the server needs some: --creds, --nkey, --nats-user/--password or --token)"
}

// Redact returns urls (comma-separated) with any password or token in
// them replaced by "xxxxx", for messages and logs.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
