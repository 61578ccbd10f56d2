package bridge

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// The parts of a link on their own, with fakes (docs/mcp.md
// "Structure").

// TestAskerRoots: roots/list names the server's roots, else the
// bridge's, as file:// URIs, and nothing when neither is set.
func TestAskerRoots(t *testing.T) {
	abs, _ := filepath.Abs("work")
	for _, tc := range []struct {
		name          string
		server, other []string
		want          []string
	}{
		{"none", nil, nil, nil},
		{"the bridge's", nil, []string{"/srv/work"}, []string{"file:///srv/work"}},
		{"the server's first", []string{"file:///data"}, []string{"/srv/work"}, []string{"file:///data"}},
		{"a relative path made absolute", []string{"work"}, nil, []string{"file://" + filepath.ToSlash(abs)}},
	} {
		a := &asker{s: &Server{Name: "s", Roots: tc.server}, defaultRoots: tc.other}
		res, err := a.ListRoots(t.Context(), mcp.ListRootsRequest{})
		if err != nil || res.Roots == nil || len(res.Roots) != len(tc.want) {
			t.Errorf("%s: %+v %v", tc.name, res, err)
			continue
		}
		for i, r := range res.Roots {
			if r.URI != tc.want[i] {
				t.Errorf("%s: %q, want %q", tc.name, r.URI, tc.want[i])
			}
		}
	}
}

// TestAskerRefusals: sampling without a sampling tool, and a question
// with no bus call behind it, are refused before anything is asked.
func TestAskerRefusals(t *testing.T) {
	noOrigin := func(context.Context) (*origin, error) { return nil, errors.New("no call in flight") }
	a := &asker{s: &Server{Name: "s"}, origin: noOrigin, questions: make(chan struct{}, maxQuestions), log: slog.New(slog.DiscardHandler)}
	if _, err := a.CreateMessage(t.Context(), mcp.CreateMessageRequest{}); !errors.Is(err, errNoSampling) {
		t.Fatalf("sampling without a tool: %v", err)
	}
	a.s.SamplingTool = "llm"
	if _, err := a.CreateMessage(t.Context(), mcp.CreateMessageRequest{}); err == nil || !strings.Contains(err.Error(), "no call in flight") {
		t.Fatalf("sampling with no origin: %v", err)
	}
	if _, err := a.Elicit(t.Context(), mcp.ElicitationRequest{}); err == nil {
		t.Fatal("an elicitation with no origin was asked")
	}
	// Full: the (maxQuestions+1)th question is refused at once.
	for range maxQuestions {
		a.questions <- struct{}{}
	}
	if _, err := a.ask(t.Context(), &origin{session: "s1"}, bus.Call{Name: "x"}, nil); err == nil || !strings.Contains(err.Error(), "questions waiting") {
		t.Fatalf("a question past the bound: %v", err)
	}
}

// TestCallerNotConnected: a call while the server is not connected (its
// tools withdrawn) is an error result, not a hang, and its progress
// token is tracked only while it runs.
func TestCallerNotConnected(t *testing.T) {
	tracked := 0
	c := &caller{
		s:     &Server{Name: "s"},
		conn:  func(context.Context, *mcpclient.Client) *mcpclient.Client { return nil },
		track: func(string, *inflight) func() { tracked++; return func() { tracked-- } },
		lost:  func() { t.Error("lost without a connection") },
		log:   slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := c.handler("t", false, true)(ctx, &worker.Call{ID: "c1", SessionID: "s1", ReplyID: "r1", Input: []byte(`{}`)})
	if err != nil || res == nil || !strings.Contains(res.Output[0].Text, "not connected") {
		t.Fatalf("%+v %v", res, err)
	}
	if tracked != 0 {
		t.Fatalf("%d calls still tracked", tracked)
	}
	if _, err := c.handler("t", false, true)(ctx, &worker.Call{ID: "c2", Input: []byte(`[1]`)}); err == nil {
		t.Fatal("an input that is not an object was taken")
	}
}

// TestLinkTrack: a tracked call is found by its token until untracked.
func TestLinkTrack(t *testing.T) {
	l := &link{s: &Server{Name: "s"}, progress: map[string]*inflight{}}
	f := &inflight{call: &worker.Call{ID: "a", SessionID: "s1"}, ctx: t.Context()}
	untrack := l.track("tok", f)
	if o, err := l.origin(t.Context()); err != nil || o.calls[0] != "a" {
		t.Fatalf("tracked: %+v %v", o, err)
	}
	untrack()
	if _, err := l.origin(t.Context()); err == nil || len(l.progress) != 0 {
		t.Fatal("untracked call still found")
	}
}

// TestStdioClosedUnstarted: a stdio transport closed without being
// started releases every end of its pipes, the server's too (the
// transport made them all; before the pipes were the command's, Close
// closed the four).
func TestStdioClosedUnstarted(t *testing.T) {
	open := func() int {
		e, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(e)
	}
	before := open()
	tr, err := newStdio(&Server{Name: "s", Transport: TransportStdio, Command: "true"}, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if n := open(); n != before+4 {
		t.Fatalf("%d descriptors open after newStdio, want %d (two pipes)", n, before+4)
	}
	_ = tr.Close()
	if n := open(); n != before {
		t.Fatalf("%d descriptors open after Close of a transport never started, want %d", n, before)
	}
	runtime.KeepAlive(tr) // no finalizer closes a leaked end before the count
}

// TestStdioStartEnded: a stdio server is not started for a context that
// has ended (as exec.CommandContext refused to before the transport
// used the command's pipes): no third-party process runs for nothing.
func TestStdioStartEnded(t *testing.T) {
	tr, err := newStdio(&Server{Name: "s", Transport: TransportStdio, Command: "sleep", Args: []string{"5"}}, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = tr.Start(ctx)
	started := tr.cmd.Process != nil
	_ = tr.Close()
	if err == nil || started {
		t.Fatalf("Start with an ended context: err %v, server started %v; want an error and no process", err, started)
	}
}
