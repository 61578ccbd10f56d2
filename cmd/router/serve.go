package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/mcp/facade"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/store"
)

// mcpOptions are the --mcp-* flags.
type mcpOptions struct {
	listen, tokens, confirm  string
	insecure                 bool
	issuer, audience, jwks   string
	userClaim, sessionsClaim string
	idle                     time.Duration
	maxSessions              int
	nkey, creds              string
	maxBytes                 int64           // P_mcp's soft bound (--mcp-max-bytes, a limit)
	refusals                 *store.Refusals // its refusals, which the router reports
}

func mcpFlags(fs *flag.FlagSet) *mcpOptions {
	o := &mcpOptions{}
	fs.StringVar(&o.listen, "mcp-listen", "", "host:port to serve MCP (streamable HTTP) at /mcp/<session>; empty serves none. Needs --mcp-tokens or --mcp-oauth-* (or --mcp-insecure on loopback)")
	fs.StringVar(&o.tokens, "mcp-tokens", "", "token file (YAML or JSON) of the MCP facade's bearer tokens: user, sessions, confirm policy of each (docs/mcp.md); SIGHUP reloads it")
	fs.BoolVar(&o.insecure, "mcp-insecure", false, "serve MCP without authentication (user from X-Toolbus-User, every session): only on a loopback --mcp-listen")
	fs.StringVar(&o.issuer, "mcp-oauth-issuer", "", "OAuth: the authorization server's issuer; access tokens are JWTs it signed")
	fs.StringVar(&o.audience, "mcp-oauth-audience", "", "OAuth: this facade's canonical URL (e.g. https://mcp.example.com/mcp); a token's aud must contain it")
	fs.StringVar(&o.jwks, "mcp-oauth-jwks", "", "OAuth: the issuer's keys, an https URL or a file (JWKS)")
	fs.StringVar(&o.userClaim, "mcp-oauth-user-claim", "sub", "OAuth: the claim naming the user")
	fs.StringVar(&o.sessionsClaim, "mcp-oauth-sessions-claim", "toolbus_sessions", "OAuth: the claim listing the sessions a token may use (scopes toolbus:session:<s> add to it)")
	fs.StringVar(&o.confirm, "mcp-confirm", "", "who confirms through the host's elicitation: host_user or approvers (default: approvers when authenticated on a non-loopback address, else host_user)")
	fs.DurationVar(&o.idle, "mcp-idle", facade.DefaultIdle, "an MCP (session, user) server unused this long is dropped")
	fs.IntVar(&o.maxSessions, "mcp-max-sessions", facade.DefaultMaxSessions, "most MCP (session, user) servers kept; the least recently used idle one makes room")
	fs.StringVar(&o.nkey, "mcp-nkey", "", "nkey seed file the facade logs in with (without --secure; default: the router's login, only when that has no credentials)")
	fs.StringVar(&o.creds, "mcp-creds", "", "JWT credentials file the facade logs in with (without --secure)")
	return o
}

// check refuses, before anything starts, an MCP facade that would serve
// unauthenticated off loopback or with an unknown confirm policy.
func (o *mcpOptions) check() error {
	if o.listen == "" {
		return nil
	}
	if _, err := facade.ParseConfirm(o.confirm); err != nil {
		return err
	}
	return facade.CheckListen(o.listen, o.tokens != "" || o.issuer != "" || o.audience != "" || o.jwks != "", o.insecure)
}

// conn returns the facade's own NATS login: the generated facade user under
// --secure, --mcp-nkey/--mcp-creds, or on open NATS the router's settings.
func (o *mcpOptions) conn(router natsconn.Config, secureDir string) (natsconn.Config, error) {
	return ownLogin(router, secureDir, security.RoleFacade, o.nkey, o.creds,
		"--mcp-listen: %s has no facade user (%s): it was generated before the facade had one; generate it again (move the directory away) or give the facade its own login",
		"--mcp-listen: the facade must not act with the router's credentials; give it its own login (--mcp-nkey or --mcp-creds: the facade user of `toolbus security config`), or use --secure")
}

// ownLogin is the login of the facade or inbox, never the router's: role's
// seed under --secure (else noSeed), nkey or creds, or on open NATS the
// router's settings; a router's own credentials are refused with shared.
func ownLogin(router natsconn.Config, secureDir, role, nkey, creds, noSeed, shared string) (natsconn.Config, error) {
	c := router
	c.Creds, c.NKey, c.User, c.Password, c.Token, c.InboxPrefix = "", "", "", "", "", ""
	switch {
	case secureDir != "":
		seed := security.SeedFile(secureDir, role)
		if _, err := os.Stat(seed); err != nil {
			return c, fmt.Errorf(noSeed, secureDir, seed)
		}
		c.NKey, c.InboxPrefix = seed, "_INBOX."+role
	case nkey != "" || creds != "":
		c.NKey, c.Creds, c.InboxPrefix = nkey, creds, "_INBOX."+role
	case router.Creds != "" || router.NKey != "" || router.User != "" || router.Token != "":
		return c, errors.New(shared)
	default:
		c = router // open NATS: the same settings, a connection of its own
		c.InboxPrefix = ""
	}
	return c, nil
}

// auth builds the facade's authentication from the flags and checks it
// against the address.
func (o *mcpOptions) auth(ctx context.Context) (facade.Authenticator, *facade.Tokens, error) {
	oauth := o.issuer != "" || o.audience != "" || o.jwks != ""
	if oauth && o.tokens != "" {
		return nil, nil, errors.New("--mcp-tokens and --mcp-oauth-* are two ways to authenticate: choose one")
	}
	var a facade.Authenticator
	var tokens *facade.Tokens
	switch {
	case oauth:
		if o.issuer == "" || o.audience == "" || o.jwks == "" {
			return nil, nil, errors.New("OAuth needs all of --mcp-oauth-issuer, --mcp-oauth-audience and --mcp-oauth-jwks")
		}
		oa, err := facade.NewOAuth(ctx, facade.OAuthConfig{Issuer: o.issuer, Resource: o.audience, JWKS: o.jwks,
			UserClaim: o.userClaim, SessionsClaim: o.sessionsClaim})
		if err != nil {
			return nil, nil, err
		}
		a = oa
	case o.tokens != "":
		t, err := facade.LoadTokens(o.tokens)
		if err != nil {
			return nil, nil, err
		}
		a, tokens = t, t
	}
	if err := facade.CheckListen(o.listen, a != nil, o.insecure); err != nil {
		return nil, nil, err
	}
	return a, tokens, nil
}

// policy is --mcp-confirm, or its default for the address.
func (o *mcpOptions) policy(authenticated bool) (facade.Confirm, error) {
	c, err := facade.ParseConfirm(o.confirm)
	if err != nil || c != "" {
		return c, err
	}
	if authenticated && !facade.Loopback(o.listen) {
		return facade.ConfirmApprovers, nil
	}
	return facade.ConfirmHostUser, nil
}

// serve serves MCP at /mcp/<session> on --mcp-listen with the facade's own
// login; without it, nothing (stop nil).
func (o *mcpOptions) serve(ctx context.Context, router natsconn.Config, secureDir, prefix string, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	if o.listen == "" {
		return nil, nil
	}
	c, err := o.conn(router, secureDir)
	if err != nil {
		return nil, err
	}
	a, tokens, err := o.auth(ctx)
	if err != nil {
		return nil, err
	}
	policy, err := o.policy(a != nil)
	if err != nil {
		return nil, err
	}
	nc, err := c.Connect("toolbus-mcp", nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	if a == nil {
		log.Warn("mcp: serving without authentication (--mcp-insecure): anyone who reaches the address acts as any user", "listen", o.listen)
	}
	f := facade.New(client.New(nc, client.Config{Prefix: prefix, Source: "toolbus/mcp"}), facade.Config{Logger: log,
		Auth: a, Insecure: a == nil, Confirm: policy, Idle: o.idle, MaxSessions: o.maxSessions, MaxBytes: o.maxBytes, Refusals: o.refusals})
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		_ = f.Drain(context.WithoutCancel(ctx))
		nc.Close()
		return nil, fmt.Errorf("--mcp-listen: %w", err)
	}
	hs := &http.Server{Handler: f.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: mcpIdleTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("mcp: serve", "err", err)
		}
	}()
	hup := make(chan os.Signal, 1)
	reloaded := make(chan struct{})
	if tokens != nil {
		signal.Notify(hup, syscall.SIGHUP)
	}
	go func() {
		defer close(reloaded)
		for range hup { // until stop closes it
			if err := tokens.Reload(); err != nil {
				log.Error("mcp: tokens not reloaded; the previous ones stay", "err", err)
			} else {
				log.Info("mcp: tokens reloaded", "file", o.tokens)
			}
		}
	}()
	fmt.Fprintf(stdout, "toolbus: MCP (streamable HTTP) at http://%s/mcp/<session> (confirmations: %s)\n", ln.Addr(), policy)
	return func() {
		signal.Stop(hup)
		close(hup) // no signal comes after Stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
		<-reloaded
		_ = f.Drain(ctx)
		nc.Close()
	}, nil
}

// inboxOptions are the --inbox-* flags: the approval inbox served beside
// the router (docs/inbox.md).
type inboxOptions struct {
	listen, token, tokenFile string
}

func inboxFlags(fs *flag.FlagSet) *inboxOptions {
	o := &inboxOptions{}
	fs.StringVar(&o.listen, "inbox-listen", "", "host:port: serve the approval inbox there (docs/inbox.md); beyond loopback it needs --inbox-token or --inbox-token-file")
	fs.StringVar(&o.token, "inbox-token", "", "the inbox page's token (default: a random one, kept in inbox.token in the --secure directory or the user cache directory's toolbus/, whose path is printed at start)")
	fs.StringVar(&o.tokenFile, "inbox-token-file", "", "FILE whose first line is the inbox page's token")
	return o
}

// serve starts the inbox; stop ends it and its connection. Without
// --inbox-listen it serves nothing and stop is nil.
func (o *inboxOptions) serve(ctx context.Context, router natsconn.Config, secureDir, prefix string, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	if o.listen == "" {
		return nil, nil
	}
	// The inbox's own login, never the router's: the approver's under
	// --secure, else the router's settings on a connection of its own.
	c, err := ownLogin(router, secureDir, security.RoleApprover, "", "", "--inbox-listen: %s has no approver user (%s)",
		"--inbox-listen: the inbox must not answer with the router's credentials; run `toolbus inbox` with the approver's (or operator's) login instead, or use --secure")
	if err != nil {
		return nil, err
	}
	nc, err := c.Connect("toolbus-inbox", nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("--inbox-listen: %w", err)
	}
	r, err := inbox.Open(ctx, nc, o.listen, o.token, o.tokenFile, inbox.Config{Prefix: prefix, Approver: secureDir != "", Logger: log})
	if err != nil {
		nc.Close()
		return nil, err
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), inboxCloseWait)
		defer cancel()
		r.Close(ctx)
		nc.Close()
	}
	if !r.Generated {
		fmt.Fprintln(stdout, r.Banner())
		return stop, nil
	}
	// A generated token goes to a private file, never to the router's
	// output (a log collector keeps that).
	file, err := inbox.SaveToken(secureDir, r.Token())
	if err != nil {
		stop()
		return nil, fmt.Errorf("--inbox-listen: %w (or give --inbox-token-file)", err)
	}
	fmt.Fprintln(stdout, r.BannerSaved(file))
	return stop, nil
}

// inboxCloseWait is how long the inbox's requests under way get on
// shutdown before open pages lose their connection.
const inboxCloseWait = 2 * time.Second

// mcpIdleTimeout closes a facade connection idle between requests (an open
// event stream is a request, not idle): without it anyone who reaches the
// port holds its connections for good (docs/security.md).
var mcpIdleTimeout = 2 * time.Minute
