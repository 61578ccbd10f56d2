package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// answerAs subscribes nc to subject and answers each request with what
// answer returns (nil: nothing), until the test ends.
func answerAs(t *testing.T, nc *nats.Conn, subject string, answer func(m *nats.Msg) [][]byte) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		for _, b := range answer(m) {
			_ = m.Respond(b)
		}
	})
	if err == nil {
		err = nc.Flush() // the server has the subscription
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// routerAnswers answers the admin verb status as a router, with data.
func routerAnswers(t *testing.T, nc *nats.Conn, data string) {
	t.Helper()
	answerAs(t, nc, bus.NewSubjects("").Admin("status"), func(m *nats.Msg) [][]byte {
		e, err := bus.NewEvent(bus.TypeAdminReply, "toolbus/router/r", json.RawMessage(data))
		var r *nats.Msg
		if err == nil {
			r, err = e.Msg(m.Reply)
		}
		if err == nil {
			err = nc.PublishMsg(r)
		}
		if err != nil {
			t.Error(err)
		}
		return nil
	})
}

// TestAttack40bStatusHostileDiscovery (session 40, red team on polish40's
// micro STATS in `toolbus status`): whoever may answer $SRV discovery (or a
// buggy router's status) names instances, tools, groups, warnings and the
// store's state with terminal escapes, a bidi override and a forged line:
// status printed them raw to the operator's terminal. Every name
// status prints is now one line with its controls written as escapes.
func TestAttack40bStatusHostileDiscovery(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	evil := "x\x1b]0;owned\x07\u202e\ninstances (NATS micro discovery):"
	name, _ := json.Marshal(evil)
	routerAnswers(t, nc, fmt.Sprintf(`{"router":%s,"tools":[{"name":%s,"live_workers":1,"groups":[%s],"workers":[%s]}],"warnings":[%s],"groups":0,"sessions":0,"parked":0,"store":{"state":%s,"error":%s,"bounds":[{"bucket":%s,"bytes":1,"bound":2}]}}`,
		name, name, name, name, name, name, name, name))
	answerAs(t, nc, "$SRV.STATS.toolbus-worker", func(*nats.Msg) [][]byte {
		return [][]byte{fmt.Appendf(nil, `{"name":"toolbus-worker","id":%s,"metadata":{"worker":%s},"endpoints":[{"name":%s,"num_requests":2}]}`, name, name, name)}
	})
	out, _, err := exec(t.Context(), "status", "--wait", "200ms", "--nats", s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Count(out, "\ninstances (NATS micro discovery):") != 1 {
		t.Fatalf("status carries a responder's controls or forged line:\n%q", out)
	}
	if strings.Count(out, `x\x1b]0;owned\x07\u202e\ninstances`) < 8 {
		t.Fatalf("the names not shown escaped:\n%s", out)
	}
}

// TestAttack40bStatusDiscoveryBytes (session 40, red team on polish40's
// bound of 1,024 answers): one responder answers discovery with answers as
// large as the server lets through (1 MiB by default, 64 MiB at most), so
// 1,024 of them held a GiB or more in the operator's status. Status's
// discovery keeps at most maxDiscoveryBytes of answers of each kind, and
// stops there. Its window here is a minute, not `status --wait 3s`: the
// 16 MiB cost 2.6 s of CPU under -race (the server, the client and the
// decoding, all in this process), 14-26 s at load 22, when no answer came
// within 3 s. The bound, not the window, ends a passing run.
func TestAttack40bStatusDiscoveryBytes(t *testing.T) {
	s := testkit.RunServer(t)
	const each, answers = 900 << 10, 30
	long := strings.Repeat("e", each)
	var out [][]byte
	for i := range answers {
		out = append(out, fmt.Appendf(nil, `{"name":"toolbus-worker","id":"w%d","metadata":{"worker":"w%d"},"endpoints":[{"name":"%s"}]}`, i, i, long))
	}
	answerAs(t, testkit.Connect(t, s), "$SRV.STATS.toolbus-worker", func(*nats.Msg) [][]byte { return out })
	kept, err := discover(t.Context(), testkit.Connect(t, s), "toolbus-worker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(kept); n == 0 || n*each > maxDiscoveryBytes+each {
		t.Fatalf("%d answers of %d bytes kept (%d MiB), want at most %d MiB", n, each, n*each>>20, maxDiscoveryBytes>>20)
	}
}
