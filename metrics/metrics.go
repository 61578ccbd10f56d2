// Package metrics defines the Prometheus metrics of routers and workers and
// serves them over HTTP. Labels stay bounded: unknown tool names count under
// "unknown", states are the fixed result states, and a router's tool and
// code labels take at most MaxLabelValues values each (then "other").
package metrics

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
)

// UnknownTool is the tool label of calls that named no registered tool.
const UnknownTool = "unknown"

// RequestTool is the tool label of calls of request-scoped tools, whose
// names the agent chooses.
const RequestTool = "request_scoped"

// MaxLabelValues bounds the distinct values of a router's tool label, and
// of its code label: names an agent chooses (a request-scoped tool's) or a
// worker registers would otherwise add series without end. Past it a new
// value counts under OtherLabel.
const MaxLabelValues = 1024

// OtherLabel is the label of values past MaxLabelValues.
const OtherLabel = "other"

var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// Router holds a router's metrics.
type Router struct {
	Calls      CounterVec   // tool, state
	Latency    HistogramVec // tool
	Batches    prometheus.Counter
	Rejected   CounterVec // code
	DedupeHits prometheus.Counter
	Parked     *prometheus.CounterVec // kind
	Answers    *prometheus.CounterVec // outcome
	Inflight   prometheus.Gauge
}

// RouterSources are read at scrape time; each is required but Bounds.
type RouterSources struct {
	LiveWorkers func() map[string][]string // per tool, the workers' ids
	ParkedNow   func() int
	Sessions    func() int
	Capacity    int                      // MaxInflight
	Bounds      func() []bus.BoundStatus // the buckets' soft bounds (nil: none)
	Catalog     []Catalog                // the catalogue's names and their bounds (protocol 7.1, 1.25)
}

// Catalog is one kind of the catalogue's names ("tool", "group") for
// toolbus_catalog_*: how many a router caches, and their bound (0: none)
// with the new names it refused.
type Catalog struct {
	Kind  string
	Held  func() int
	Bound func() (int, uint64)
}

// NewRouter registers a router's metrics on reg (a fresh registry when nil).
func NewRouter(reg prometheus.Registerer, src RouterSources) *Router {
	tools := new(labels)
	m := &Router{
		Calls:    CounterVec{counterVec("toolbus_router_calls_total", "Finished tool calls by tool and result state.", "tool", "state"), tools},
		Latency:  HistogramVec{latencyVec("toolbus_router_call_duration_seconds", "Time from a call's batch arriving to its result, by tool (parked calls excluded)."), tools},
		Batches:  prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_router_batches_total", Help: "Batches accepted."}),
		Rejected: CounterVec{counterVec("toolbus_router_rejected_total", "Messages answered with io.toolbus.error, by code.", "code"), new(labels)},
		DedupeHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "toolbus_router_dedupe_hits_total",
			Help: "Calls answered from the dedupe ledger, or from a background task an earlier copy of the call started, instead of running again."}),
		Parked:   counterVec("toolbus_router_parked_total", "Calls parked, by kind.", "kind"),
		Answers:  counterVec("toolbus_router_answers_total", "Answers to parked calls, by outcome (accepted or an error code).", "outcome"),
		Inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolbus_router_inflight", Help: "Messages being handled now."}),
	}
	cs := []prometheus.Collector{m.Calls.vec, m.Latency.vec, m.Batches, m.Rejected.vec, m.DedupeHits, m.Parked, m.Answers, m.Inflight,
		gaugeFunc("toolbus_router_capacity", "MaxInflight: messages the router handles at once before back-pressure.",
			func() int { return src.Capacity }),
		gaugeFunc("toolbus_parked_calls", "Calls parked now.", src.ParkedNow),
		gaugeFunc("toolbus_sessions", "Sessions in the router's cache.", src.Sessions),
		&liveWorkers{f: src.LiveWorkers, desc: prometheus.NewDesc("toolbus_live_workers", "Live workers per tool.", []string{"tool"}, nil)},
	}
	if src.Bounds != nil {
		cs = append(cs, &bounds{f: src.Bounds, descs: [3]*prometheus.Desc{
			prometheus.NewDesc("toolbus_store_refused_total", "New keys refused at a bucket's soft bound (limit_exceeded), by bucket; mcp's by the MCP facade the router serves.", []string{"bucket"}, nil),
			prometheus.NewDesc("toolbus_store_bytes", "A bounded bucket's bytes as last read (at most a second before a scrape) plus those admitted since.", []string{"bucket"}, nil),
			prometheus.NewDesc("toolbus_store_soft_bound_bytes", "A bucket's soft bound: new keys are refused at it (cache: its oldest entries go past it).", []string{"bucket"}, nil)}})
	}
	for _, c := range src.Catalog {
		kind := prometheus.Labels{"kind": c.Kind}
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolbus_catalog_" + c.Kind + "s", Help: "Names in the router's catalogue cache (P_tools, P_groups)."},
				func() float64 { return float64(c.Held()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolbus_catalog_bound", Help: "The catalogue's bound on names, by kind (--max-tools, --max-groups; 0: none).", ConstLabels: kind},
				func() float64 { b, _ := c.Bound(); return float64(b) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolbus_catalog_refused_total", Help: "New names refused limit_exceeded at the catalogue's bound, by kind.", ConstLabels: kind},
				func() float64 { _, n := c.Bound(); return float64(n) }))
	}
	register(reg, cs...)
	return m
}

// labels is the set of values a label has taken, at most MaxLabelValues.
type labels struct {
	seen sync.Map // value -> struct{}
	n    atomic.Int32
}

// of returns v while the set has room for it, else OtherLabel.
func (l *labels) of(v string) string {
	if _, ok := l.seen.Load(v); ok {
		return v
	}
	if l.n.Add(1) > MaxLabelValues {
		l.n.Add(-1)
		return OtherLabel
	}
	if _, dup := l.seen.LoadOrStore(v, struct{}{}); dup {
		l.n.Add(-1)
	}
	return v
}

// CounterVec is a counter vector whose first label is bounded (labels).
type CounterVec struct {
	vec *prometheus.CounterVec
	l   *labels
}

// WithLabelValues is the counter of the values, the first one bounded
// (in place: lvs is the caller's variadic list).
func (c CounterVec) WithLabelValues(lvs ...string) prometheus.Counter {
	lvs[0] = c.l.of(lvs[0])
	return c.vec.WithLabelValues(lvs...)
}

// HistogramVec is a histogram vector of one bounded label (labels).
type HistogramVec struct {
	vec *prometheus.HistogramVec
	l   *labels
}

// WithLabelValues is the histogram of the value, bounded.
func (h HistogramVec) WithLabelValues(v string) prometheus.Observer {
	return h.vec.WithLabelValues(h.l.of(v))
}

type liveWorkers struct {
	f    func() map[string][]string
	desc *prometheus.Desc
}

func (l *liveWorkers) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }
func (l *liveWorkers) Collect(ch chan<- prometheus.Metric) {
	for tool, ids := range l.f() {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, float64(len(ids)), tool)
	}
}

// bounds collects RouterSources.Bounds: refused (not the cache's), bytes
// and soft bound.
type bounds struct {
	f     func() []bus.BoundStatus
	descs [3]*prometheus.Desc
}

func (b *bounds) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range b.descs {
		ch <- d
	}
}

func (b *bounds) Collect(ch chan<- prometheus.Metric) {
	for _, x := range b.f() {
		if !x.DropsOldest { // the cache refuses nothing
			ch <- prometheus.MustNewConstMetric(b.descs[0], prometheus.CounterValue, float64(x.Refused), x.Bucket)
		}
		ch <- prometheus.MustNewConstMetric(b.descs[1], prometheus.GaugeValue, float64(x.Bytes), x.Bucket)
		ch <- prometheus.MustNewConstMetric(b.descs[2], prometheus.GaugeValue, float64(x.Bound), x.Bucket)
	}
}

// Worker holds a worker's metrics. It is the worker.Observer of a worker
// whose metrics are exposed (worker.Config.Observer).
type Worker struct {
	calls    *prometheus.CounterVec   // tool, state
	latency  *prometheus.HistogramVec // tool
	inflight prometheus.Gauge
	waiting  prometheus.Gauge       // requests waiting for a free slot
	rejected *prometheus.CounterVec // tool: registrations rejected, so not served
	busy     *prometheus.CounterVec // tool: requests answered busy
}

// NewWorker registers a worker's metrics on reg (a fresh registry when nil);
// slots is the worker's MaxConcurrent, shown as toolbus_worker_slots.
func NewWorker(reg prometheus.Registerer, slots int) *Worker {
	m := &Worker{
		calls:    counterVec("toolbus_worker_calls_total", "Calls run by this worker, by tool and result state.", "tool", "state"),
		latency:  latencyVec("toolbus_worker_call_duration_seconds", "Run time of calls on this worker, by tool."),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolbus_worker_inflight", Help: "Calls running now."}),
		waiting:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolbus_worker_waiting", Help: "Requests waiting for a free slot."}),
		rejected: counterVec("toolbus_worker_rejected_total",
			"Registrations of a tool that the routers rejected, by tool: the worker does not serve it until one is accepted.", "tool"),
		busy: counterVec("toolbus_worker_busy_total", "Requests answered busy, by tool: every slot was busy and too many calls were waiting.", "tool"),
	}
	register(reg, m.calls, m.latency, m.inflight, m.waiting, m.rejected, m.busy,
		gaugeFunc("toolbus_worker_slots", "MaxConcurrent: calls this worker runs at once.", func() int { return slots }))
	return m
}

// Waiting adds delta to the requests waiting for a free slot.
func (m *Worker) Waiting(delta int) { m.waiting.Add(float64(delta)) }

// Running adds delta to the calls running now.
func (m *Worker) Running(delta int) { m.inflight.Add(float64(delta)) }

// Finished counts a call of tool that ended in state after d.
func (m *Worker) Finished(tool, state string, d time.Duration) {
	m.calls.WithLabelValues(tool, state).Inc()
	m.latency.WithLabelValues(tool).Observe(d.Seconds())
}

// Rejected counts a registration of tool that the routers rejected
// (worker.RejectObserver).
func (m *Worker) Rejected(tool, _ string) { m.rejected.WithLabelValues(tool).Inc() }

// Busy counts a request of tool answered busy (worker.BusyObserver).
func (m *Worker) Busy(tool string) { m.busy.WithLabelValues(tool).Inc() }

// register registers cs on reg; a nil reg is a fresh registry nobody reads.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	for _, c := range cs {
		_ = reg.Register(c)
	}
}

func latencyVec(name, help string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, []string{"tool"})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeFunc(name, help string, f func() int) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
}

// Since returns the seconds elapsed since t, for histograms.
func Since(t time.Time) float64 { return time.Since(t).Seconds() }

// Expose returns the registry a process registers its metrics on, served
// (with Go and process collectors) on addr at /metrics until stop; nil and
// a no-op stop for an empty addr (metrics stay private). Stop waits for the
// scrapes under way until its ctx ends, then closes their connections and
// waits for their handlers, which the closing ends, at most
// life.DefaultCleanup more: nothing of the endpoint runs once it returns.
func Expose(addr, who string, stdout io.Writer) (reg prometheus.Registerer, stop func(context.Context) error, err error) {
	if addr == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	r := prometheus.NewRegistry()
	_ = r.Register(collectors.NewGoCollector())
	_ = r.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	l := life.New(life.Config{})
	sc := &scrapes{render: promhttp.HandlerFor(r, promhttp.HandlerOpts{}), held: map[net.Conn]*answer{}, waiting: map[string]*answer{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, req *http.Request) {
		if !l.Enter() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		defer l.Leave()
		sc.serve(w, req)
	})
	// ReadTimeout: a scrape announcing a body it never sends was under way
	// for good, and held the daemon's Stop (TestAttackStopHeldByAScrape).
	// WriteTimeout: so was one whose client never reads its answer, holding
	// a handler and the metrics it gathered (TestAttackScrapeNeverRead).
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, ConnContext: withConn}
	l.Loop(func(context.Context) { _ = srv.Serve(ln) }) // ends with http.ErrServerClosed at Shutdown
	fmt.Fprintf(stdout, "%s: metrics on http://%s/metrics\n", who, ln.Addr())
	return r, func(ctx context.Context) error {
		// Scrapes under way finish until ctx ends, then lose their connection.
		err := srv.Shutdown(ctx)
		if err != nil {
			_ = srv.Close()
		}
		_ = l.Drain(ctx) // the handlers the Close cut off, and Serve
		return err
	}, nil
}

// idleTimeout closes a connection idle between requests: without it anyone
// who reaches the port holds its connections for good (docs/security.md).
var idleTimeout = 2 * time.Minute

// writeTimeout bounds the writing of a scrape's answer, from its request
// read: Prometheus's own default scrape timeout (the answer's size is
// bounded: MaxLabelValues).
var writeTimeout = 10 * time.Second

// maxScrapes bounds the answers (renders) being written at once: one more
// closes the connections of the one held longest. A Prometheus server scrapes one
// at a time: four leave room for a pair of them and a person's curl.
const maxScrapes = 4

// scrapes renders each scrape's answer into a buffer, one at a time, and
// writes it outside that bound; at most maxScrapes answers are held at once
// (their memory), a new one closing the connections of the longest held;
// the scrapes that wait for a render share the next one (rendered). A
// scrape never read thus holds no reader's scrape off: before, the bound
// covered the writing too, and 4 held ones had every scrape answered 503
// until their write deadline (TestAttack41HeldScrapesRefuseNone).
type scrapes struct {
	render http.Handler // promhttp's: negotiates the format and compression
	one    sync.Mutex   // one render at a time

	mu      sync.Mutex
	held    map[net.Conn]*answer // the answers being written, by connection
	order   []*answer            // the answers held, oldest first, at most maxScrapes
	waiting map[string]*answer   // the next render of each format, which the scrapes that wait share
}

// rendered returns req's answer from the next render of its format that
// starts once it came: the scrapes waiting meanwhile share it, so a queue
// of scrapes nobody reads costs one render, not one each, and holds a
// reader's scrape off by one render at most (TestAttack41QueuedScrapesShareARender).
// The format is what promhttp negotiates from Accept, and gzip or not: a
// few, whatever the headers say.
func (s *scrapes) rendered(req *http.Request) *answer {
	h := http.Header{"Accept": {string(expfmt.Negotiate(req.Header))}}
	if strings.Contains(req.Header.Get("Accept-Encoding"), "gzip") {
		h.Set("Accept-Encoding", "gzip")
	}
	key := h.Get("Accept") + "\n" + h.Get("Accept-Encoding")
	s.mu.Lock()
	a, shared := s.waiting[key]
	if !shared {
		a = &answer{header: http.Header{}, code: http.StatusOK, done: make(chan struct{})}
		s.waiting[key] = a
	}
	s.mu.Unlock()
	if shared {
		<-a.done
		return a
	}
	defer close(a.done) // a collector's panic too: no scrape waits for good
	s.one.Lock()
	defer s.one.Unlock()
	s.mu.Lock()
	delete(s.waiting, key) // the scrapes that come from now on wait for the next
	s.mu.Unlock()
	rq := req.Clone(context.WithoutCancel(req.Context())) // its client may leave: the others' answer
	rq.Header = h
	s.render.ServeHTTP(a, rq)
	return a
}

func (s *scrapes) serve(w http.ResponseWriter, req *http.Request) {
	a := s.rendered(req)
	if c, ok := req.Context().Value(connKey{}).(net.Conn); ok { // always (withConn)
		s.hold(c, a)
		defer s.release(c)
	}
	maps.Copy(w.Header(), a.header)
	w.WriteHeader(a.code)
	_, _ = w.Write(a.body.Bytes())
}

// hold counts c's answer a as held, closing, past maxScrapes answers, the
// connections of the one held longest: the scrapes that share an answer
// share its memory, and one reader's write is not cut by the rest of its
// render's queue.
func (s *scrapes) hold(c net.Conn, a *answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[c] = a
	if a.holders++; a.holders == 1 {
		s.order = append(s.order, a)
	}
	if len(s.order) > maxScrapes {
		old := s.order[0]
		old.holders = 0 // one that comes late counts it again
		for c, a := range s.held {
			if a == old {
				_ = c.Close() // its write fails: its handler returns
				delete(s.held, c)
			}
		}
		s.order = s.order[1:]
	}
}

// release drops c's answer, written or cut off.
func (s *scrapes) release(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.held[c]
	if !ok {
		return
	}
	delete(s.held, c)
	if a.holders--; a.holders == 0 {
		s.order = slices.DeleteFunc(s.order, func(o *answer) bool { return o == a })
	}
}

// answer is a rendered scrape: the header, status and body promhttp wrote.
type answer struct {
	header  http.Header
	code    int
	body    bytes.Buffer
	holders int           // the connections writing it (scrapes.hold), under scrapes.mu
	done    chan struct{} // closed once rendered (scrapes.rendered)
}

func (a *answer) Header() http.Header         { return a.header }
func (a *answer) WriteHeader(code int)        { a.code = code }
func (a *answer) Write(p []byte) (int, error) { return a.body.Write(p) }

// connKey is the key of a request's connection in its context (withConn).
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}
