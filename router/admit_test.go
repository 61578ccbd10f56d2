package router_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/router"
)

// TestBurstAnswersEveryBatch: a burst of batches from many sessions at a
// router with a handful of slots; every batch gets exactly one reply, a
// call.reply or busy, none is dropped (docs/protocol.md 1).
func TestBurstAnswersEveryBatch(t *testing.T) {
	const (
		batches  = 5000
		sessions = 1000
		senders  = 4
	)
	d := xtest.Run(t, xtest.Config{Routers: 1, Router: router.Config{MaxInflight: 4, MaxQueued: 4, Notices: router.Notices{First: time.Millisecond, Every: time.Millisecond}}})
	ctx := t.Context()
	nc, err := d.Connect(ctx, xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		replies = make([]int, batches)
		kinds   = map[string]int{}
		bad     []string
		all     = make(chan struct{})
		got     int
	)
	// The replies only: a batch that waits for a slot gets running notices
	// on its reply subject + ".running" (3.2.1; here after 1 ms, as a burst
	// under load waits 2 s), which "_INBOX.burst.>" took for more replies of
	// batch 0.
	sub, err := nc.Subscribe("_INBOX.burst.*", func(m *nats.Msg) {
		i, _ := strconv.Atoi(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		e, err := bus.Decode(m)
		kind := "undecodable"
		if err == nil {
			kind = e.Type
			if e.Type == bus.TypeError {
				var be bus.Error
				_ = e.DataAs(&be)
				kind = be.Code
				if be.Code == bus.CodeBusy && be.Message != bus.BusyText {
					kind = "busy with another text: " + be.Message
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if kind != bus.TypeCallReply && kind != bus.CodeBusy {
			bad = append(bad, fmt.Sprintf("batch %d: %s", i, kind))
		}
		kinds[kind]++
		if replies[i]++; replies[i] == 1 {
			if got++; got == batches {
				close(all)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	msgs := make([]*nats.Msg, batches)
	for i := range msgs {
		e, err := bus.NewEvent(bus.TypeCallBatch, "burst", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "no_such_tool", Input: json.RawMessage(`{}`)}}})
		if err != nil {
			t.Fatal(err)
		}
		e.ID = "r" + strconv.Itoa(i)
		e.SessionID = "s" + strconv.Itoa(i%sessions)
		m := nats.NewMsg(d.Subjects().Call(e.SessionID))
		m.Reply = "_INBOX.burst." + strconv.Itoa(i)
		if m.Data, err = json.Marshal(e); err != nil {
			t.Fatal(err)
		}
		m.Header.Set(bus.HeaderContentType, bus.ContentTypeEvent)
		msgs[i] = m
	}
	start := time.Now()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := s; i < batches; i += senders {
				if err := nc.PublishMsg(msgs[i]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	sent := time.Since(start)
	select {
	case <-all:
	case <-time.After(3 * time.Minute):
	}
	elapsed := time.Since(start)
	_ = nc.Flush()
	mu.Lock()
	defer mu.Unlock()
	var missing, twice []int
	for i, n := range replies {
		switch {
		case n == 0:
			missing = append(missing, i)
		case n > 1:
			twice = append(twice, i)
		}
	}
	t.Logf("%d batches from %d sessions sent in %v; all answered in %v (%.0f batches/s): %v",
		batches, sessions, sent.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(batches)/elapsed.Seconds(), kinds)
	if len(missing) > 0 {
		t.Errorf("%d batches got no reply, e.g. %v", len(missing), missing[:min(10, len(missing))])
	}
	if len(twice) > 0 {
		t.Errorf("%d batches got more than one reply, e.g. %v", len(twice), twice[:min(10, len(twice))])
	}
	if len(bad) > 0 {
		t.Errorf("%d unexpected replies, e.g. %v", len(bad), bad[:min(10, len(bad))])
	}
	if kinds[bus.CodeBusy] == 0 {
		t.Errorf("no busy reply: the burst did not fill 4 slots and 4 queue places")
	}
}
