// Package inbox serves the approval inbox: a web page that lists the calls
// waiting for a person across every session (confirmations and external
// calls), live, and lets that person allow, allow and remember, deny with
// a reason, or answer an external call. The page is plain HTML, CSS and
// JavaScript embedded in the binary; the list comes from a watch of the
// parked records (docs/protocol.md 6.1) and every answer goes through
// client.Confirm or client.Answer (6.3), bound to the exact call: the
// page sends the input digest and the record's revision it showed.
//
// docs/inbox.md describes the choices and the access model.
package inbox

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/external"
	"github.com/toolbus/toolbus/store"
)

//go:embed assets
var assets embed.FS

// Config configures a Server.
type Config struct {
	// Prefix is the deployment's subject prefix; "" means bus.DefaultPrefix.
	Prefix string
	// Token is the secret every request must carry; required.
	Token string
	// Source is the CloudEvents source of the answers the inbox sends
	// (who answered, as the router records it); "" means "toolbus/inbox".
	Source string
	// Approver says the connection is the approver role: it answers
	// confirmations only (external calls are listed, not answerable), and
	// it may not create consumers, so the inbox polls P.admin.parked.list
	// every PollInterval and reads each new call's record with a direct
	// get instead of watching the bucket.
	Approver bool
	// PollInterval is the approver's polling period; zero means a second.
	PollInterval time.Duration
	// MaxItems bounds the calls sent to a page; zero means 500.
	MaxItems int
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

// Item is one waiting call as the page shows it.
type Item struct {
	Key            string          `json:"key"`
	Revision       uint64          `json:"revision"`
	Session        string          `json:"session"`
	ReplyID        string          `json:"reply_id"`
	ID             string          `json:"id"`
	Tool           string          `json:"tool"`
	Kind           string          `json:"kind"`
	User           json.RawMessage `json:"user,omitempty"`
	Context        json.RawMessage `json:"context,omitempty"`
	Input          json.RawMessage `json:"input,omitempty"`
	InputDigest    string          `json:"input_digest"`
	SuggestedRules []bus.Rule      `json:"suggested_rules,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	Created        time.Time       `json:"created"`
	Expires        time.Time       `json:"expires"`
	// Note says why the call cannot be answered from this page, if so.
	Note string `json:"note,omitempty"`
}

// Server is the inbox. It is safe for concurrent use.
type Server struct {
	cl   *client.Client
	js   jetstream.JetStream
	subj bus.Subjects
	cfg  Config
	page *template.Template
	kv   jetstream.KeyValue
	// tools are the tool definitions, for external answers' output
	// schemas; nil for the approver, which answers no external call.
	tools jetstream.KeyValue

	mu      sync.Mutex
	items   map[string]Item
	changed chan struct{} // closed and replaced on every change
	stop    func()        // ends the watch or the polling
}

// New returns a Server answering on nc; call Start before serving.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	if len(cfg.Token) < 16 {
		return nil, errors.New("inbox: a token of at least 16 characters is required")
	}
	if cfg.Source == "" {
		cfg.Source = "toolbus/inbox"
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = 500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	page, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, fmt.Errorf("inbox: page: %w", err)
	}
	return &Server{cl: client.New(nc, client.Config{Prefix: cfg.Prefix, Source: cfg.Source}), js: js,
		subj: bus.NewSubjects(cfg.Prefix), cfg: cfg, page: page, items: map[string]Item{}, changed: make(chan struct{})}, nil
}

// Start watches the parked records (the call records only, keys
// <session>.<replyid>.<callid>, never the batches' continuations), or
// polls them as the approver, and returns once the current ones are
// loaded.
func (s *Server) Start(ctx context.Context) error {
	kv, err := s.js.KeyValue(ctx, s.subj.Bucket(bus.BucketParked))
	if err != nil {
		return fmt.Errorf("inbox: parked calls: %w (is a router running, and may this login read them?)", err)
	}
	s.kv = kv
	if s.cfg.Approver {
		return s.startPolling(ctx)
	}
	if s.tools, err = s.js.KeyValue(ctx, s.subj.Bucket(bus.BucketTools)); err != nil {
		return fmt.Errorf("inbox: tool definitions: %w", err)
	}
	w, err := store.WatchKV(ctx, kv, "*.*.*", s.apply)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	select {
	case <-w.Ready():
	case <-ctx.Done():
		w.Stop()
		return ctx.Err()
	}
	s.mu.Lock()
	s.stop = w.Stop
	s.mu.Unlock()
	return nil
}

// Stop ends the watch or the polling; safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// apply keeps the items in step with one parked record.
func (s *Server) apply(e jetstream.KeyValueEntry) {
	it, ok := s.item(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, had := s.items[e.Key()]; had && old.Revision > e.Revision() {
		return // a late delivery (a fresh get came first)
	}
	if ok {
		s.items[e.Key()] = it
	} else if _, had := s.items[e.Key()]; had {
		delete(s.items, e.Key())
	} else {
		return
	}
	s.changedLocked()
}

// drop forgets the call key.
func (s *Server) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, had := s.items[key]; had {
		delete(s.items, key)
		s.changedLocked()
	}
}

func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// item is the entry as a waiting call; false when it waits for nothing.
func (s *Server) item(e jetstream.KeyValueEntry) (Item, bool) {
	if e.Operation() != jetstream.KeyValuePut {
		return Item{}, false
	}
	var r external.Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		s.cfg.Logger.Warn("inbox: ignoring a bad parked record", "key", e.Key(), "err", err)
		return Item{}, false
	}
	if r.Status != external.StatusParked || (r.Kind != bus.KindConfirm && r.Kind != bus.KindExternal) {
		return Item{}, false
	}
	digest := r.InputDigest
	if digest == "" {
		digest = bus.InputDigest(r.Call.Input)
	}
	it := Item{Key: e.Key(), Revision: e.Revision(), Session: r.Session, ReplyID: r.ReplyID, ID: r.Call.ID, Tool: r.Call.Name,
		Kind: r.Kind, User: r.User, Context: r.Context, Input: r.Call.Input, InputDigest: digest,
		SuggestedRules: r.SuggestedRules, Reason: r.Reason, Created: r.Created, Expires: r.Expires}
	switch {
	case r.RequestScoped:
		it.Note = "a request-scoped tool: the agent that called it answers it"
	case r.Kind == bus.KindExternal && s.cfg.Approver:
		it.Note = "this inbox logs in as the approver, which answers confirmations only: the tool's handler (or `toolbus answer` as the operator) answers it"
	}
	return it, true
}

// snapshot returns the waiting calls oldest first, at most MaxItems, the
// total count, and the channel closed at the next change.
func (s *Server) snapshot() ([]Item, int, <-chan struct{}) {
	s.mu.Lock()
	out := make([]Item, 0, len(s.items))
	for _, it := range s.items {
		out = append(out, it)
	}
	ch := s.changed
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Item) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	n := len(out)
	if n > s.cfg.MaxItems {
		out = out[:s.cfg.MaxItems]
	}
	return out, n, ch
}

// lookup returns the waiting call key.
func (s *Server) lookup(key string) (Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[key]
	return it, ok
}

// Handler returns the page, its assets and its API. Every request needs
// the token (the cookie set by the first visit with ?token=, or the
// header); POSTs need the header.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.serveIndex)
	mux.HandleFunc("GET /api/events", s.serveEvents)
	mux.HandleFunc("GET /api/calls", s.serveCalls)
	mux.HandleFunc("POST /api/act", s.serveAct)
	return s.guard(mux)
}

// guard checks the token and sets the headers every answer carries.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'none'")
		if tok := r.URL.Query().Get("token"); tok != "" && r.Method == http.MethodGet && r.URL.Path == "/" {
			if !s.same(tok) {
				http.Error(w, "401 unauthorized: the token is wrong; open the URL the inbox printed at start", http.StatusUnauthorized)
				return
			}
			// The token leaves the address bar (and the history) at once.
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.cfg.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if !s.authorized(r) {
			http.Error(w, "401 unauthorized: open the URL the inbox printed at start (with ?token=...)", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && !s.same(r.Header.Get(TokenHeader)) {
			http.Error(w, "403 forbidden: a POST needs the "+TokenHeader+" header", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The page reads the token from its meta tag for its POSTs' header;
	// another origin cannot read the page.
	if err := s.page.Execute(w, map[string]any{"Token": s.cfg.Token, "Approver": s.cfg.Approver}); err != nil {
		s.cfg.Logger.Warn("inbox: page", "err", err)
	}
}

// callList is what the page receives.
type callList struct {
	Calls []Item `json:"calls"`
	Total int    `json:"total"`
}

func (s *Server) serveCalls(w http.ResponseWriter, _ *http.Request) {
	items, n, _ := s.snapshot()
	writeJSON(w, http.StatusOK, callList{Calls: items, Total: n})
}

// keepAlive is how often an idle event stream gets a comment line, so
// proxies and the browser keep it open.
const keepAlive = 15 * time.Second

// serveEvents streams the list of waiting calls, again at every change.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	if _, err := fmt.Fprint(w, "retry: 1000\n\n"); err != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		items, n, changed := s.snapshot()
		b, _ := json.Marshal(callList{Calls: items, Total: n})
		if _, err := fmt.Fprintf(w, "event: calls\ndata: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
	wait:
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
			goto wait
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
