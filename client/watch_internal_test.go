package client

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// TestListingFollows: what each write reports, read as the routers read
// it: a record that does not decode reports nothing, a worker's heartbeat
// nothing, its arrival, leaving and deletion every session.
func TestListingFollows(t *testing.T) {
	subj := bus.NewSubjects("")
	follows := map[string]listingFollow{}
	for _, f := range listingSubjects(subj) {
		follows[f.subject] = f
	}
	kv := func(b string) string { return "$KV." + subj.Bucket(b) + "." }
	del := nats.Header{"KV-Operation": []string{"DEL"}}
	purge := nats.Header{"KV-Operation": []string{"PURGE"}}
	w := &ListingWatch{workers: map[string]bool{}}
	for _, c := range []struct {
		name, follow, subject string
		header                nats.Header
		data                  string
		want                  string
		ok                    bool
	}{
		{"session record", kv(bus.BucketSessions) + ">", kv(bus.BucketSessions) + "s1", nil, `{"active":[]}`, "s1", true},
		{"session deleted", kv(bus.BucketSessions) + ">", kv(bus.BucketSessions) + "s1", del, "", "s1", true},
		{"session purged", kv(bus.BucketSessions) + ">", kv(bus.BucketSessions) + "s1", purge, "", "s1", true},
		{"session not json", kv(bus.BucketSessions) + ">", kv(bus.BucketSessions) + "s1", nil, `{"active"`, "", false},
		{"session key not an id", kv(bus.BucketSessions) + ">", kv(bus.BucketSessions) + "a.b", nil, `{}`, "", false},
		{"session key empty", kv(bus.BucketSessions) + ">", kv(bus.BucketSessions), nil, `{}`, "", false},
		{"tool", kv(bus.BucketTools) + ">", kv(bus.BucketTools) + "echo", nil, `{"name":"echo"}`, AllSessions, true},
		{"tool deleted", kv(bus.BucketTools) + ">", kv(bus.BucketTools) + "echo", del, "", AllSessions, true},
		{"tool not json", kv(bus.BucketTools) + ">", kv(bus.BucketTools) + "echo", nil, "\x00\xff", "", false},
		{"group", kv(bus.BucketGroups) + ">", kv(bus.BucketGroups) + "g", nil, `{"name":"g"}`, AllSessions, true},
		{"group not json", kv(bus.BucketGroups) + ">", kv(bus.BucketGroups) + "g", nil, `}`, "", false},
		{"skill", "$O." + subj.ObjectStore(bus.ObjectSkills) + ".M.>", "$O." + subj.ObjectStore(bus.ObjectSkills) + ".M.Zw==", nil, `{"name":"g"}`, AllSessions, true},
		{"skill not json", "$O." + subj.ObjectStore(bus.ObjectSkills) + ".M.>", "$O." + subj.ObjectStore(bus.ObjectSkills) + ".M.Zw==", nil, ``, "", false},
		// One worker's key, in order.
		{"worker arrives", kv(bus.BucketWorkers) + ">", kv(bus.BucketWorkers) + "echo.w1", nil, `{}`, AllSessions, true},
		{"heartbeat", kv(bus.BucketWorkers) + ">", kv(bus.BucketWorkers) + "echo.w1", nil, `{"inflight":[]}`, "", false},
		{"not a beat: still live", kv(bus.BucketWorkers) + ">", kv(bus.BucketWorkers) + "echo.w1", nil, `garbage`, "", false},
		{"worker leaves", kv(bus.BucketWorkers) + ">", kv(bus.BucketWorkers) + "echo.w1", nil, `{"left":true}`, AllSessions, true},
		{"left, then deleted", kv(bus.BucketWorkers) + ">", kv(bus.BucketWorkers) + "echo.w1", del, "", "", false},
		{"first seen", kv(bus.BucketWorkers) + ">", kv(bus.BucketWorkers) + "echo.w2", nil, `{"binary":true}`, AllSessions, true},
		{"its key expires", kv(bus.BucketWorkers) + ">", kv(bus.BucketWorkers) + "echo.w2", purge, "", AllSessions, true},
	} {
		f, ok := follows[c.follow]
		if !ok {
			t.Fatalf("%s: %s is not followed", c.name, c.follow)
		}
		id, ok := f.session(w, &nats.Msg{Subject: c.subject, Header: c.header, Data: []byte(c.data)})
		if id != c.want || ok != c.ok {
			t.Errorf("%s: (%q, %v), want (%q, %v)", c.name, id, ok, c.want, c.ok)
		}
	}
	// Keys of workers that expired without leaving are bounded.
	for i := range maxWorkerKeys + 10 {
		_, _ = w.workerChanged(&nats.Msg{Subject: kv(bus.BucketWorkers) + "t.w" + strconv.Itoa(i), Data: []byte(`{}`)})
	}
	if len(w.workers) > maxWorkerKeys {
		t.Errorf("%d worker keys kept, at most %d", len(w.workers), maxWorkerKeys)
	}
	if len(follows) != 5 {
		t.Errorf("%d subjects followed, want 5", len(follows))
	}
}
