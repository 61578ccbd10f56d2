package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
)

// TestWatchListings: against a real nats-server, a write to each bucket
// that makes listings reports them (a session's record its session; tool
// definitions, groups, a worker arriving and leaving, a skill every
// session), a bad record before a good one in the same bucket reports only
// the good one, the watch creates no consumer, a bucket created after the
// watch started is followed, and nothing is reported once Stop returned.
func TestWatchListings(t *testing.T) {
	srv := testkit.RunServer(t)
	cl := client.New(testkit.Connect(t, srv), client.Config{})
	js := testkit.JetStream(t, testkit.Connect(t, srv))
	var err error
	ctx := t.Context()
	subj := cl.Subjects()
	kv := map[string]jetstream.KeyValue{}
	for _, b := range []string{bus.BucketSessions, bus.BucketTools, bus.BucketWorkers} {
		kv[b], err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subj.Bucket(b), Storage: jetstream.MemoryStorage})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan string, 64)
	w := client.WatchListings(ctx, cl, time.Second, func(id string) { got <- id })
	// P_groups and the skills' store exist only once the watch runs.
	kv[bus.BucketGroups], err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subj.Bucket(bus.BucketGroups), Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	skills, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: subj.ObjectStore(bus.ObjectSkills), Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want, what string) {
		t.Helper()
		if id := testkit.Recv(t, got, 10*time.Second, what); id != want {
			t.Fatalf("%s: reported %q, want %q", what, id, want)
		}
	}
	put := func(bucket, key, value string) {
		t.Helper()
		if _, err := kv[bucket].Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}

	put(bus.BucketSessions, "s1", `{"active":["a"]}`)
	next("s1", "a session's record")
	// One subscription per bucket delivers in order: the bad records
	// before s2's are reported nothing.
	put(bus.BucketSessions, "s1", `not json`)
	put(bus.BucketSessions, "a.b", `{}`) // not a session id
	put(bus.BucketSessions, "s2", `{}`)
	next("s2", "a session's record after bad ones")
	if err := kv[bus.BucketSessions].Delete(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	next("s2", "a session deleted")

	put(bus.BucketTools, "echo", `{"name":"echo"}`)
	next(client.AllSessions, "a tool definition")
	put(bus.BucketGroups, "g", `{"name":"g"}`)
	next(client.AllSessions, "a group in a bucket made after the watch")
	put(bus.BucketWorkers, "echo.w1", string(bus.WorkerBeat{}.Encode()))
	next(client.AllSessions, "a worker arriving")
	put(bus.BucketWorkers, "echo.w1", string(bus.WorkerBeat{}.Encode())) // a heartbeat
	put(bus.BucketWorkers, "echo.w1", string(bus.WorkerLeft))
	next(client.AllSessions, "a worker leaving")
	if _, err := skills.PutBytes(ctx, "greet/SKILL.md", []byte("---\nname: greet\n---\n")); err != nil {
		t.Fatal(err)
	}
	next(client.AllSessions, "a skill")
	// The skill's chunk is not metadata; nothing more is pending.
	put(bus.BucketSessions, "s3", `{}`)
	next("s3", "the last write")

	// No consumer anywhere: what a secured facade may not create.
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		if info.State.Consumers != 0 {
			t.Errorf("stream %s has %d consumers", info.Config.Name, info.State.Consumers)
		}
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}

	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	put(bus.BucketSessions, "s4", `{}`)
	put(bus.BucketTools, "echo", `{"name":"echo","description":"x"}`)
	if err := cl.Conn().Flush(); err != nil { // the writes reached the watch's connection
		t.Fatal(err)
	}
	select {
	case id := <-got:
		t.Fatalf("reported %q after Stop", id)
	default: // Stop returned: no call of changed may follow
	}
}

// A caller that serves sessions' tool listings (the MCP facade) lists a
// session again when its listing may have changed.
func ExampleWatchListings() {
	cl, err := client.Dial(natsconn.FromEnv(), client.Config{Source: "my-facade"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	defer cl.Close(ctx)
	w := client.WatchListings(ctx, cl, 0, func(session string) {
		if session == client.AllSessions {
			fmt.Println("list every session again")
			return
		}
		fmt.Printf("list session %q again\n", session) // must not block: hand it on
	})
	defer func() { _ = w.Stop(ctx) }()
	// ... serve the sessions' listings until done.
}
