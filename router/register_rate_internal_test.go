package router

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/registry"
	"github.com/toolbus/toolbus/store"
)

// TestRegistrationRefusedUnread: what refuses a registration whatever it
// holds, its subject or its account's rate, is answered before the decode
// (docs/registry.md): data that is no event at all gets that refusal, not
// the decode's bad_event, which it gets within the rate.
func TestRegistrationRefusedUnread(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	w := &wire{nc: nc, subj: bus.NewSubjects(""), source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler), base: t.Context(),
		m: metrics.NewRouter(nil, metrics.RouterSources{})}
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	spent := registry.NewRate(1)
	spent.Take("", 8)
	for _, c := range []struct {
		name, subject string
		rate          *registry.Rate
		shared        bool
		want          string
	}{
		{"over the rate", "toolbus.register.t", spent, false, `"code":"limit_exceeded"`},
		{"the shared subject refused", "toolbus.register", nil, true, `"code":"bad_request","message":"this router takes no registrations`},
		{"no tool in the subject", "toolbus.register.a.b.c", nil, false, `"code":"bad_event","message":"subject`},
		{"within the rate: decoded", "toolbus.register.t", registry.NewRate(0), false, `"code":"bad_event"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := &registrar{wire: w, rate: c.rate, refuseShared: c.shared}
			x.onRegister(&nats.Msg{Subject: c.subject, Reply: sub.Subject, Data: []byte(strings.Repeat("not an event ", 1000))})
			r, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(r.Data), c.want) {
				t.Fatalf("got %s, want %s", r.Data, c.want)
			}
		})
	}
}

// TestRegistrationGroupPastBoundUnread: a registration of a new group on
// its own subject, past the catalogue's bound (1.25), is rejected as it was
// after the decode, but before it (data that is no event gets the
// rejection); a held group's is decoded.
func TestRegistrationGroupPastBoundUnread(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	st, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects(""), store.Config{Memory: true, Heartbeat: time.Minute, MaxGroups: 1})
	if err != nil {
		t.Fatal(err)
	}
	gs := groups.New(st, groups.Config{})
	if err := gs.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, gs.Stop)
	w := &wire{nc: nc, subj: bus.NewSubjects(""), source: "toolbus/router/r1", log: slog.New(slog.DiscardHandler), base: t.Context(),
		m: metrics.NewRouter(nil, metrics.RouterSources{})}
	x := &registrar{wire: w, groups: gs}
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	send := func(group string, data []byte) string {
		x.onRegister(&nats.Msg{Subject: w.subj.Workers.RegisterGroup(group), Reply: sub.Subject, Data: data})
		r, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Data)
	}
	e, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/w", bus.Register{Worker: "w", Groups: []bus.Group{{Name: "held", Scope: bus.ScopeMeta}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Msg("")
	if err != nil {
		t.Fatal(err)
	}
	if got := send("held", m.Data); !strings.Contains(got, `"accepted":["held"]`) {
		t.Fatalf("the first group: %s", got)
	}
	garbage := []byte(strings.Repeat("not an event ", 1000))
	if got := send("new", garbage); !strings.Contains(got, `"rejected":[{"name":"new","reason":"limit_exceeded: the catalogue holds 1 groups`) {
		t.Fatalf("a new group past the bound: %s, want it rejected unread", got)
	}
	if got := send("held", garbage); !strings.Contains(got, `"code":"bad_event"`) {
		t.Fatalf("a held group's: %s, want it decoded (bad_event)", got)
	}
}
