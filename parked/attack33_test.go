package parked

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// bigInput is a parked input of n KiB (an object, as a validated input is).
func bigInput(n int, v string) json.RawMessage {
	return json.RawMessage(`{"v":"` + v + `","x":"` + strings.Repeat("x", n<<10) + `"}`)
}

// storedBytes is the bytes P_parked's stream holds.
func storedBytes(t *testing.T, s *Store) uint64 {
	t.Helper()
	info, err := s.calls.kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.Bytes()
}

// TestAttackParkedFillDisk (session 33): a session agent parks calls with
// large inputs (or batch contexts), has them end (cancel, expiry, an
// answer) and repeats; an ended record kept its input and context for the
// bucket's 7 days (10 parks of 400 KiB left 4.1 MB). Since 1.23 every
// ending holds an input of 1 KiB or more by its digest and drops such a
// context or user, so the bucket keeps a few hundred bytes a call, while
// the ending's caller (the audit trail) still gets them.
func TestAttackParkedFillDisk(t *testing.T) {
	s := start(t, newStore(t))
	ctx := t.Context()
	ends := map[string]func(*Record) (*Record, error){
		"cancel": func(r *Record) (*Record, error) {
			got, err := s.Cancel(ctx, r.Session, r.ReplyID, nil)
			if len(got) != 1 {
				return nil, fmt.Errorf("cancel ended %d calls (%v)", len(got), err)
			}
			return got[0], err
		},
		"expire": func(r *Record) (*Record, error) {
			for _, got := range s.Expire(ctx, r.Expires.Add(time.Second)) {
				if got.Key() == r.Key() {
					return got, nil
				}
			}
			return nil, fmt.Errorf("not expired")
		},
		"answer": func(r *Record) (*Record, error) {
			a := &bus.Answer{State: bus.StateSuccess, Output: bus.Text("done")}
			got, err := s.Answer(ctx, r.Key(), "deploy", a, func(r *Record, a *bus.Answer) (Verdict, bus.Result, error) {
				return Done, bus.Result{ID: r.Call.ID, Name: r.Call.Name, State: bus.StateSuccess, Output: a.Output}, nil
			})
			return got.Record, err
		},
	}
	before := storedBytes(t, s)
	n := 0
	for name, end := range ends {
		for i := range 4 {
			r := record("s1", fmt.Sprintf("%s%d", name, i), "c1")
			r.Call.Input, r.Context = bigInput(400, name), bigInput(100, "context")
			park(t, s, r)
			n++
			got, err := end(r)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if string(got.Call.Input) != string(r.Call.Input) || string(got.Context) != string(r.Context) {
				t.Fatalf("%s: the ending's caller lost the input or context: %.60s, %.60s", name, got.Call.Input, got.Context)
			}
			stored, err := s.Read.Get(ctx, r.Key())
			if err != nil {
				t.Fatal(err)
			}
			_, canon := bus.CallDigests("deploy", r.Call.Input)
			if stored.Status == bus.ParkParked || heldDigest(stored) != canon || stored.InputDigest != bus.InputDigest(r.Call.Input) || stored.Context != nil {
				t.Fatalf("%s: the ended record keeps %.60s (status %s, input_digest %s)", name, stored.Call.Input, stored.Status, stored.InputDigest)
			}
		}
	}
	// Every ended record is small: the bucket grew by n records, not n inputs.
	grew := storedBytes(t, s) - before
	if grew > uint64(n)*2<<10 {
		t.Fatalf("P_parked grew by %d bytes for %d parks of 400 KiB that ended", grew, n)
	}
	t.Logf("P_parked grew by %d bytes for %d parks of 400 KiB inputs and 100 KiB contexts, ended", grew, n)
	// A small input and context are kept as they were (compared whole, 1.13).
	r := park(t, s, record("s1", "small", "c1"))
	if _, err := s.Cancel(ctx, "s1", "small", nil); err != nil {
		t.Fatal(err)
	}
	if stored, err := s.Read.Get(ctx, r.Key()); err != nil || string(stored.Call.Input) != `{"env":"prod"}` || string(stored.Context) != `{"tenant":"acme"}` {
		t.Fatalf("a small ended input: %+v, %v", stored, err)
	}
}

// TestResendAfterEnd: a re-sent batch meets its call's ended record, which
// holds a large input by its digest: the same input (as sent, in another
// key order, as a JSON string) is still the same call, another one is
// refused (docs/protocol.md 3.1), a record that stands alone (SameRecorded)
// or carries its batch (Park), ended by a cancel or by a cancel before it
// parked (Cancels.Forestall).
func TestResendAfterEnd(t *testing.T) {
	st := newStore(t)
	s, other := start(t, st), startAs(t, st, "router-b")
	ctx := t.Context()
	in := bigInput(2, "a")
	quoted, _ := json.Marshal(string(in))
	same := map[string]json.RawMessage{
		"as sent":       in,
		"key order":     json.RawMessage(`{"x":"` + strings.Repeat("x", 2<<10) + `","v":"a"}`),
		"a JSON string": quoted,
	}
	differ := map[string]json.RawMessage{
		"another value": bigInput(2, "b"),
		"the mark":      json.RawMessage(heldMark + mustDigest(in) + `"`),
		"nothing":       nil,
	}
	carriedRun := func(reply string, input json.RawMessage) Run {
		r := record("s1", reply, "c1")
		r.Call.Input = input
		b := newBatch("s1", reply)
		b.Data.Calls = []bus.Call{r.Call}
		return Run{Batch: b, Calls: []*Record{r}, Results: map[string]bus.Result{}, Next: 1, Alone: true}
	}
	if got, err := s.Park(ctx, carriedRun("carried", in)); err != nil || got.Before {
		t.Fatalf("park: %+v, %v", got, err)
	}
	if _, err := s.Cancel(ctx, "s1", "carried", nil); err != nil {
		t.Fatal(err)
	}
	alone := record("s1", "forestalled", "c1")
	alone.Call.Input = in
	if err := s.Cancels.Forestall(ctx, "s1", "forestalled", alone.Call, bus.ErrorResult(alone.Call, bus.CodeInterrupted, bus.InterruptedText)); err != nil {
		t.Fatal(err)
	}
	for _, reply := range []string{"carried", "forestalled"} {
		rec, err := other.Read.Get(ctx, bus.CallKey("s1", reply, "c1"))
		if err != nil {
			t.Fatal(err)
		}
		if heldDigest(rec) == "" {
			t.Fatalf("%s: the ended record keeps %.60s", reply, rec.Call.Input)
		}
		for name, input := range same {
			if err := SameRecorded([]bus.Call{{ID: "c1", Name: "deploy", Input: input}}, rec); err != nil {
				t.Errorf("%s, %s: refused: %v", reply, name, err)
			}
		}
		for name, input := range differ {
			if err := SameRecorded([]bus.Call{{ID: "c1", Name: "deploy", Input: input}}, rec); err == nil {
				t.Errorf("%s, %s: taken", reply, name)
			}
		}
	}
	for name, input := range same {
		if got, err := other.Park(ctx, carriedRun("carried", input)); err != nil || !got.Before || got.Differs != nil || got.Batch == nil {
			t.Errorf("a copy (%s) of the ended carried batch: %+v, %v", name, got, err)
		}
	}
	for name, input := range differ {
		if got, err := other.Park(ctx, carriedRun("carried", input)); err != nil || !got.Before || got.Differs == nil {
			t.Errorf("a copy (%s) with another input: %+v, %v", name, got, err)
		}
	}
}

func mustDigest(in json.RawMessage) string {
	_, d := bus.CallDigests("deploy", in)
	return d
}

// TestAttackParkedFillDiskCarried (session 33): a batch whose last call
// alone waits is carried in that call's record (1.6), with the batch's other
// calls' inputs, their results and its context, so the same loop with the
// large input in an earlier call kept it (four such batches, ended: 1.6 MB).
// The ending holds the carried batch's inputs by their digests too and
// drops its large context; a re-sent copy is still compared whole.
func TestAttackParkedFillDiskCarried(t *testing.T) {
	st := newStore(t)
	s, other := start(t, st), startAs(t, st, "router-b")
	ctx := t.Context()
	run := func(reply, earlier string) Run {
		r := record("s1", reply, "c1")
		b := newBatch("s1", reply)
		b.Data.Calls = []bus.Call{{ID: "c0", Name: "echo", Input: bigInput(400, earlier)}, r.Call}
		b.Data.Context = bigInput(100, "context")
		return Run{Batch: b, Calls: []*Record{r}, Results: map[string]bus.Result{"c0": ok("c0")}, Next: 2, Alone: true}
	}
	before := storedBytes(t, s)
	for i := range 4 {
		if _, err := s.Park(ctx, run(fmt.Sprintf("r%d", i), "a")); err != nil {
			t.Fatal(err)
		}
		ended, err := s.Cancel(ctx, "s1", fmt.Sprintf("r%d", i), nil)
		if err != nil || len(ended) != 1 || carried(ended[0]).Data.Calls[0].Input == nil {
			t.Fatalf("cancel: %v, %v (the caller's copy keeps its batch whole)", ended, err)
		}
	}
	grew := storedBytes(t, s) - before
	if grew > 4*3<<10 {
		t.Fatalf("P_parked grew by %d bytes for 4 carried batches with a 400 KiB input, ended", grew)
	}
	t.Logf("P_parked grew by %d bytes for 4 carried batches with a 400 KiB earlier input and a 100 KiB context, ended", grew)
	if got, err := other.Park(ctx, run("r0", "a")); err != nil || !got.Before || got.Differs != nil || got.Batch == nil || got.Batch.Results["c0"].ID != "c0" {
		t.Fatalf("a copy of an ended carried batch: %+v, %v", got, err)
	}
	if got, err := other.Park(ctx, run("r1", "b")); err != nil || !got.Before || got.Differs == nil {
		t.Fatalf("a copy with another earlier input: %+v, %v", got, err)
	}
}
