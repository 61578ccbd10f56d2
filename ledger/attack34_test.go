package ledger

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

// TestAttackLedgerFillDisk (session 34, protocol 1.24): an agent's write
// calls, each recording a 4 KiB result, fill P_ledger to its soft bound.
// The next new call ends limit_exceeded without running and nothing is
// written under its key; a re-sent call of each recorded one still gets
// its recorded result (its key is held: no new key), not a second run.
func TestAttackLedgerFillDisk(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	st, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects("toolbus"), store.Config{Memory: true, LedgerMaxBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	l := New(st.Ledger, Config{Router: "a", Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	key := func(i int) string { return fmt.Sprintf("s.r%d.c1", i) }
	output := func(i int) string { return fmt.Sprintf("%d:%s", i, strings.Repeat("x", 4<<10)) }
	call := func(i int) (res bus.Result, ran bool) {
		c := Call{Key: key(i), Call: bus.Call{ID: "c1", Name: "write"}, Timeout: time.Minute}
		return l.Claimed(ctx, c, func(claim Entry) bus.Result {
			ran = true
			got, _ := l.Record(ctx, key(i), claim, bus.Result{ID: "c1", Name: "write", State: bus.StateSuccess, Output: bus.Text(output(i))})
			return got
		}), ran
	}
	refused := -1
	for i := 0; refused < 0 && i < 5000; i++ {
		switch res, ran := call(i); {
		case res.State == bus.StateSuccess && ran:
		case res.Error != nil && res.Error.Code == bus.CodeLimitExceeded && !ran:
			if !strings.Contains(res.Error.Message, "was not run: the ledger of calls holds as much as it may") {
				t.Fatalf("the refusal: %s", res.Error.Message)
			}
			refused = i
		default:
			t.Fatalf("call %d: ran %v, %+v", i, ran, res)
		}
	}
	if refused < 1 {
		t.Fatalf("refused at %d", refused)
	}
	if _, err := st.Ledger.Get(ctx, key(refused)); !store.IsNotFound(err) {
		t.Fatalf("the refused call's key: %v", err)
	}
	for i := range refused {
		if res, ran := call(i); ran || res.State != bus.StateSuccess || textOf(res.Output) != output(i) {
			t.Fatalf("re-sent call %d at the bound: ran %v, %s %.40s", i, ran, res.State, textOf(res.Output))
		}
	}
	t.Logf("%d write calls of 4 KiB results before the soft bound of 32 KiB refused the next", refused)
}

// TestResultByReference (protocol 1.24): a write call's result above
// RefAbove is kept in P_outputs and its ledger entry holds a reference, so
// the entry stays small. A re-sent call (on another router) gets the same
// result, also after a worker wrote the object's metadata again; once the
// object is gone, a re-sent call gets unknown_outcome saying so, never
// another result.
func TestResultByReference(t *testing.T) {
	nc := testkit.Connect(t, testkit.RunServer(t))
	st, err := store.Setup(t.Context(), testkit.JetStream(t, nc), bus.NewSubjects("toolbus"), store.Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	bucket := bus.NewSubjects("toolbus").ObjectStore(bus.ObjectOutputs)
	var ls []*Ledger
	for _, id := range []string{"a", "b"} {
		refs, err := offload.New(nc, bucket, offload.Limits{Inline: RefAbove})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, New(st.Ledger, Config{Router: id, Logger: slog.New(slog.DiscardHandler), Outputs: refs, Stored: offload.NewStore(nc, bucket)}))
	}
	want := bus.Result{ID: "c1", Name: "write", State: bus.StateSuccess, Output: bus.Text(strings.Repeat("y", 200<<10)), Metadata: []byte(`{"k":1}`)}
	call := func(l *Ledger, key string, out bus.Result) (res bus.Result, ran bool) {
		c := Call{Key: key, Call: bus.Call{ID: "c1", Name: "write"}, Timeout: time.Minute}
		return l.Claimed(ctx, c, func(claim Entry) bus.Result {
			ran = true
			got, _ := l.Record(ctx, key, claim, out)
			return got
		}), ran
	}
	small := want
	small.Output = bus.Text("small")
	for key, out := range map[string]bus.Result{"s.r1.c1": want, "s.r2.c1": small} {
		if res, ran := call(ls[0], key, out); !ran || !reflect.DeepEqual(res, out) {
			t.Fatalf("%s: ran %v", key, ran)
		}
		e, err := st.Ledger.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		le, _ := entryOf(e, nil)
		if byRef := le.ResultRef != ""; byRef != (out.Size() > RefAbove) || len(e.Value()) > max(2<<10, out.Size()+1<<10) {
			t.Fatalf("%s: entry of %d bytes, reference %q", key, len(e.Value()), le.ResultRef)
		}
		if res, ran := call(ls[1], key, bus.Result{}); ran || !reflect.DeepEqual(res, out) {
			t.Fatalf("%s re-sent: ran %v, %s %.60v", key, ran, res.State, res.Output)
		}
		t.Logf("%s: a result of %d bytes leaves an entry of %d bytes", key, out.Size(), len(e.Value()))
	}
	e, _ := st.Ledger.Get(ctx, "s.r1.c1")
	le, _ := entryOf(e, nil)
	ref, err := offload.ParseRef(le.ResultRef)
	if err != nil {
		t.Fatal(err)
	}
	js := testkit.JetStream(t, nc)
	stream, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	// Its metadata written again (a worker may write P_outputs): the
	// writer's first metadata counts (offload.Store.Info), the same result.
	meta := "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(ref.Name))
	m, err := stream.GetLastMsgForSubject(ctx, meta)
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	info["digest"] = "SHA-256=" + base64.URLEncoding.EncodeToString(make([]byte, 32))
	forged, _ := json.Marshal(info)
	if _, err := js.Publish(ctx, meta, forged); err != nil {
		t.Fatal(err)
	}
	if res, ran := call(ls[1], "s.r1.c1", bus.Result{}); ran || !reflect.DeepEqual(res, want) {
		t.Fatalf("re-sent after a forged metadata: ran %v, %s", ran, res.State)
	}
	// Gone (purged by an operator): unknown_outcome that says so.
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	res, ran := call(ls[1], "s.r1.c1", bus.Result{})
	if ran || res.Error == nil || res.Error.Code != bus.CodeUnknownOutcome || !strings.Contains(res.Error.Message, "its recorded result is no longer kept") {
		t.Fatalf("re-sent with its result gone: ran %v, %+v %s", ran, res.Error, res.State)
	}
	t.Logf("%s", res.Error.Message)
}
