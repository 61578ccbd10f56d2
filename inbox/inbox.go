// Package inbox serves the approval inbox, a web page listing live the calls
// waiting for a person in every session, to allow, deny or answer through
// the client, bound to the exact call shown (docs/inbox.md).
package inbox

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/life"
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
	// Approver: the approver role answers confirmations only and has no
	// JetStream API, so the inbox polls P.admin.parked.list instead.
	Approver bool
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

// maxItems bounds the calls sent to a page.
const maxItems = 500

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
	// InputOmitted: the router's list left the input out (docs/inbox.md);
	// Note then says it cannot be answered until it is read.
	InputOmitted bool `json:"input_omitted,omitempty"`
	// Note says why the call cannot be answered from this page, if so.
	Note string `json:"note,omitempty"`
}

// Server is the inbox: the waiting calls (records) and the token-gated page
// and API. Safe for concurrent use.
type Server struct {
	*records

	cl   *client.Client
	js   jetstream.JetStream
	subj bus.Subjects
	cfg  Config
	page *template.Template
	// tools are the tool definitions, for external answers' output
	// schemas; nil for the approver, which answers no external call.
	tools jetstream.KeyValue

	mu    sync.Mutex
	stop  func(context.Context) error // ends the watch or the polling
	guess chan struct{}               // held by a wrong token's answer (same)
	codes codes                       // one-time login codes (serveLogin)
}

// New returns a Server answering on nc; call Start before serving.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	if len(cfg.Token) < 16 {
		return nil, errors.New("inbox: a token of at least 16 characters is required")
	}
	cfg.Source = cmp.Or(cfg.Source, "toolbus/inbox")
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	page, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, fmt.Errorf("inbox: page: %w", err)
	}
	return &Server{cl: client.New(nc, client.Config{Prefix: cfg.Prefix, Source: cfg.Source}), js: js,
		subj: bus.NewSubjects(cfg.Prefix), cfg: cfg, page: page, guess: make(chan struct{}, 1), records: newRecords(maxItems, cfg.Approver, cfg.Logger)}, nil
}

// Start watches (or as the approver polls) the call records, returning once
// they are loaded. Reads deciding an answer come from the stream leader
// (docs/inbox.md).
func (s *Server) Start(ctx context.Context) error {
	if s.cfg.Approver {
		rr := &routerReads{cl: s.cl, records: s.records, known: math.MaxUint64}
		s.records.fetch = rr.read
		return s.startPolling(ctx, rr)
	}
	kv, err := s.js.KeyValue(ctx, s.subj.Bucket(bus.BucketParked))
	if err != nil {
		return fmt.Errorf("inbox: parked calls: %w (is a router running, and may this login read them?)", err)
	}
	leader, err := store.OpenKV(ctx, s.js, kv)
	if err != nil {
		return fmt.Errorf("inbox: parked calls: %w", err)
	}
	s.records.fetch = leaderReads(leader, s.records)
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
		_ = w.Stop(context.WithoutCancel(ctx))
		return ctx.Err()
	}
	s.mu.Lock()
	s.stop = w.Stop
	s.mu.Unlock()
	return nil
}

// leaderReads reads a call's record from the stream leader: a follower may
// not have it yet.
func leaderReads(kv *store.KV, s *records) func(context.Context, string) (reading, error) {
	return func(ctx context.Context, key string) (reading, error) {
		e, err := kv.Get(ctx, key)
		if store.IsNotFound(err) {
			return reading{}, nil
		}
		if err != nil {
			return reading{}, err
		}
		var r bus.ParkRecord
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &r) != nil {
			return reading{}, fmt.Errorf("a bad parked record %s", key)
		}
		it, ok := s.item(key, e.Revision(), r)
		return reading{it: it, waits: ok, rev: e.Revision()}, nil
	}
}

// Stop ends the watch or the polling, waiting for it until ctx ends; safe
// to call twice.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop == nil {
		return nil
	}
	return stop(ctx)
}

// Handler returns the page, its assets and its API; every API request
// needs the token in its header (guard).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.serveIndex)
	mux.HandleFunc("GET /api/events", s.serveEvents)
	mux.HandleFunc("GET /api/calls", s.serveCalls)
	mux.HandleFunc("POST /api/act", s.serveAct)
	mux.HandleFunc("POST /api/login", s.serveLogin)
	return s.guard(mux)
}

func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.page.Execute(w, map[string]any{"Approver": s.cfg.Approver}); err != nil {
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
	w.Header().Set("Content-Type", "text/event-stream")
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

// startPolling loads the waiting calls as the approver may read them, then
// keeps polling until Stop: P.admin.parked.list every second.
func (s *Server) startPolling(ctx context.Context, rr *routerReads) error {
	if err := rr.poll(ctx); err != nil {
		// A router that answered with an error (its cache of parked calls
		// behind the store: it refuses a list that could leave a waiting
		// call out) is there: the next polls fill the list. No router, or
		// one of another protocol, fails the start.
		if _, ok := errors.AsType[*bus.Error](err); !ok {
			return err
		}
		s.cfg.Logger.Warn("inbox: parked.list at start", "err", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		life.Every(ctx, time.Second, func(time.Time) {
			if err := rr.poll(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("inbox: parked.list", "err", err)
			}
		})
	}()
	s.mu.Lock()
	s.stop = func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("inbox: polling stop: %w", ctx.Err())
		}
	}
	s.mu.Unlock()
	return nil
}

// routerReads reads the parked calls through a router's parked.list, up to
// date with the leader (ParkedNow), for the approver's polling and answers.
type routerReads struct {
	cl *client.Client
	*records
	// known is the highest revision the last poll listed (at start, and
	// after a poll that failed: all): the next one asks for the calls up to
	// it without their inputs (omit_through), which the records hold or
	// read on their own (whole). Only poll uses it.
	known uint64
}

// poll lists the waiting calls into the records, up to maxPages pages,
// and drops those held since before the list was asked for that it does
// not list, up to where it stopped. Only the inputs of calls newer than
// the last poll come in its pages; the others' are held or read on their
// own, maxInputReads a poll (docs/inbox.md).
func (rr *routerReads) poll(ctx context.Context) error {
	mark := rr.mark() // before the list is asked for: a call read afresh meanwhile stays
	seen := make(map[string]bool)
	reads, top := maxInputReads, uint64(0)
	last, err := rr.walk(ctx, "", rr.known, func(p bus.ParkedCall, before string) bool {
		key := bus.CallKey(p.Session, p.ReplyID, p.ID)
		seen[key], top = true, max(top, p.Revision)
		rr.set(key, rr.readingOf(rr.whole(ctx, p, before, &reads)))
		return true
	})
	if err != nil {
		rr.known = math.MaxUint64 // a page too slow to serve with inputs: the next asks for none
		return err
	}
	rr.known = top
	var covered func(Item) bool
	if last != nil { // stopped at maxPages: what comes after is not known
		covered = func(it Item) bool {
			return cmp.Or(it.Created.Compare(last.Created), strings.Compare(it.Key, bus.CallKey(last.Session, last.ReplyID, last.ID))) <= 0
		}
	}
	rr.prune(seen, mark, covered)
	return nil
}

// maxPages bounds the pages of parked.list one poll or read asks for: the
// calls past them show once those before are answered (docs/inbox.md).
const maxPages = 16

// maxInputReads bounds the inputs a poll reads on their own (left out of
// a page, input_omitted) that it does not hold already: each is read once
// a revision, a page of one call (at most the call input bound).
const maxInputReads = 16

// listWait bounds one parked.list: a router waits up to 2 s for its cache,
// then may read the session's records from the stream leader one by one.
const listWait = 10 * time.Second

// page asks a router for the page after cursor after ("": the first) of
// the calls parked in session ("" for all), at most limit (0: any), those
// of revision at most omit without their inputs. A router before 1.30
// refuses omit_through: the page is then asked for without it.
func (rr routerReads) page(ctx context.Context, session, after string, limit int, omit uint64) (bus.ParkedPage, error) {
	lctx, cancel := context.WithTimeout(ctx, listWait)
	defer cancel()
	var page bus.ParkedPage
	err := rr.cl.Admin(lctx, "parked.list", session, bus.ParkedQuery{After: after, Limit: limit, OmitThrough: omit}, &page)
	if be := (*bus.Error)(nil); omit > 0 && errors.As(err, &be) && be.Code == bus.CodeBadRequest {
		err = rr.cl.Admin(lctx, "parked.list", session, bus.ParkedQuery{After: after, Limit: limit}, &page)
	}
	if err != nil {
		return page, err
	}
	if slices.ContainsFunc(page.Parked, func(p bus.ParkedCall) bool { return p.Revision == 0 }) {
		return page, errors.New("the router's parked.list carries no revisions: the approver's inbox needs routers of protocol 1.14")
	}
	return page, nil
}

// walk visits the calls parked in session ("" for all), page by page, at
// most maxPages, until visit returns false; before is the cursor of the
// call listed before p. It returns the last call listed when pages were
// left (nil when it listed all or visit stopped it).
func (rr routerReads) walk(ctx context.Context, session string, omit uint64, visit func(p bus.ParkedCall, before string) bool) (*bus.ParkedCall, error) {
	after, last := "", bus.ParkedCall{}
	for range maxPages {
		page, err := rr.page(ctx, session, after, 0, omit)
		if err != nil {
			return nil, err
		}
		for _, p := range page.Parked {
			if !visit(p, after) {
				return nil, nil
			}
			after, last = p.Cursor(), p
		}
		if page.Next == "" || len(page.Parked) == 0 {
			return nil, nil
		}
		after = page.Next
	}
	return &last, nil
}

// whole is p with its input when the page left it out: the input held at
// the same revision, or else (while *reads lasts) the page of p alone.
func (rr routerReads) whole(ctx context.Context, p bus.ParkedCall, before string, reads *int) bus.ParkedCall {
	if !p.InputOmitted {
		return p
	}
	key := bus.CallKey(p.Session, p.ReplyID, p.ID)
	if held, ok := rr.lookup(key); ok && held.Revision == p.Revision && !held.InputOmitted {
		p.Input, p.Context, p.User, p.InputOmitted = held.Input, held.Context, held.User, false
		return p
	}
	if *reads == 0 {
		return p
	}
	*reads--
	if page, err := rr.page(ctx, p.Session, before, 1, 0); err == nil && len(page.Parked) == 1 &&
		page.Parked[0].Revision == p.Revision && bus.CallKey(page.Parked[0].Session, page.Parked[0].ReplyID, page.Parked[0].ID) == key {
		return page.Parked[0]
	}
	return p
}

// read reads call key: from the pages of its session.
func (rr routerReads) read(ctx context.Context, key string) (reading, error) {
	session, _, _ := strings.Cut(key, ".")
	var r reading
	reads := 1
	last, err := rr.walk(ctx, session, 0, func(p bus.ParkedCall, before string) bool {
		if bus.CallKey(p.Session, p.ReplyID, p.ID) != key {
			return true
		}
		r = rr.readingOf(rr.whole(ctx, p, before, &reads))
		return false
	})
	if err == nil && last != nil {
		err = fmt.Errorf("call %s is not in the first %d pages of its session's parked.list", key, maxPages)
	}
	return r, err
}

// readingOf is a listed call as a reading of its record.
func (rr routerReads) readingOf(p bus.ParkedCall) reading {
	it, ok := rr.item(bus.CallKey(p.Session, p.ReplyID, p.ID), p.Revision, bus.ParkRecord{Session: p.Session, ReplyID: p.ReplyID,
		Call: bus.Call{ID: p.ID, Name: p.Name, Input: p.Input}, InputDigest: p.InputDigest, Kind: p.Kind, User: p.User,
		Context: p.Context, SuggestedRules: p.SuggestedRules, Reason: p.Reason, RequestScoped: p.RequestScoped,
		Status: bus.ParkParked, Created: p.Created, Expires: p.Expires})
	if it.InputOmitted = p.InputOmitted; ok && p.InputOmitted && it.Note == "" {
		it.Note = "its input did not fit in the router's list: it shows here once read on its own (toolbus parked --session " + p.Session + " lists it)"
	}
	return reading{it: it, waits: ok, rev: p.Revision}
}
