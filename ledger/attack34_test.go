package ledger

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
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
