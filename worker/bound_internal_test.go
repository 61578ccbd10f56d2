package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttackWaitingBytesBounded: a flood of 1,024 requests with inputs of
// the router's 1 MiB, at a worker whose one slot is taken, would have
// every one of them wait (the count's bound), a gigabyte held. The
// requests waiting are bounded by their bytes too (MaxWaitingBytes, 16 MiB
// here to keep the test short under -race; 64 MiB by default): the bytes
// held, counted after every request, never pass it, the rest are answered
// busy at once and counted, and once the slot frees every waiting call is
// answered.
func TestAttackWaitingBytesBounded(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	if w, err := New(nc, Config{}); err != nil {
		t.Fatal(err)
	} else if w.cfg.MaxWaitingBytes != DefaultMaxWaitingBytes {
		t.Fatalf("by default MaxWaitingBytes is %d, want %d", w.cfg.MaxWaitingBytes, DefaultMaxWaitingBytes)
	}
	if _, err := New(nc, Config{MaxWaitingBytes: -1}); err == nil {
		t.Fatal("a negative MaxWaitingBytes was taken")
	}
	const limit = 16 << 20
	w, err := New(nc, Config{ID: "w1", MaxConcurrent: 1, MaxWaitingBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	if err := w.Handle(bus.ToolDef{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *Call) (*bus.ExecResult, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return &bus.ExecResult{Output: bus.Text("done")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	tl := w.tools[0]
	tl.accepted.Store(true)
	tl.decide()

	answers := make(chan string, 2048)
	sub, err := nc.Subscribe("_INBOX.flood.>", func(m *nats.Msg) {
		var be bus.Error // a busy answer is an error event of code busy
		if e, err := bus.Decode(m); err != nil || e.Type == bus.TypeError && e.DataAs(&be) != nil {
			be.Code = fmt.Sprint("undecodable: ", err)
		} else if be.Code == "" {
			be.Code = e.Type
		}
		answers <- be.Code
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// The requests share one input's bytes here (a worker holds each its
	// own), and differ in their reply id, all of one size.
	req := bus.ExecRequest{Call: bus.Call{ID: "c1", Name: "slow", Input: json.RawMessage(`{"pad":"` + strings.Repeat("x", 1<<20-16) + `"}`)},
		User: json.RawMessage("null"), Context: json.RawMessage("null"), Attempt: 1}
	data, exp := req.AppendJSON(nil), bus.FormatExpiry(time.Now().Add(time.Hour))
	exec := func(i int) *request {
		e := bus.Head(bus.TypeExec, "toolbus/router/r1")
		e.Data = data
		e.SessionID, e.ReplyID, e.ToolCallID = "flood-session", fmt.Sprintf("flood-reply-%04d", i), "c1"
		e.ExpiryTime = exp
		m := bus.CompactMsg(w.subj.Workers.Exec("slow"), &e)
		m.Reply = fmt.Sprintf("_INBOX.flood.%04d", i)
		return newRequest(m)
	}
	running := make(chan struct{})
	go func() { defer close(running); w.onExec(tl, exec(0)) }() // takes the slot and holds it
	<-entered

	const flood = 1024
	size := msgSize(&exec(1).m)
	fits := int(limit / size)
	for i := 1; i <= flood; i++ {
		w.onExec(tl, exec(i))
		if held := w.waitingBytes.Load(); held > limit {
			t.Fatalf("after request %d the waiting requests hold %d bytes, past %d", i, held, limit)
		}
	}
	if n, held := w.waiting.Load(), w.waitingBytes.Load(); n != int64(fits) || held != int64(fits)*size {
		t.Fatalf("%d requests waiting with %d bytes, want %d of %d bytes each", n, held, fits, size)
	}
	if busy := w.busyN.Load(); busy != int64(flood-fits) {
		t.Fatalf("%d busy answers counted, want %d", busy, flood-fits)
	}

	close(release)
	kinds := map[string]int{}
	for range flood + 1 {
		select {
		case k := <-answers:
			kinds[k]++
		case <-time.After(bound):
			t.Fatalf("answers %v of %d", kinds, flood+1)
		}
	}
	<-running
	if want := map[string]int{bus.TypeExecResult: fits + 1, bus.CodeBusy: flood - fits}; fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", kinds, want)
	}
	testkit.CheckFor(t, bound, time.Millisecond, func() error {
		if n, held := w.waiting.Load(), w.waitingBytes.Load(); n != 0 || held != 0 {
			return fmt.Errorf("%d requests, %d bytes still counted waiting", n, held)
		}
		return nil
	})
}

// bound is the generous limit for anything that should happen "soon".
const bound = 10 * time.Second
