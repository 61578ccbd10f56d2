package security

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/router"
)

// TestAttackAuditFloodErasesNothing (session 32, red team): s2's agent
// floods the audit trail with cheap calls (64 a batch of a tool that does
// not exist: each is a record) to push alice's earlier call in s1 out of
// the trail, or to fill the disk. The trail is bounded (here 32 KiB; by
// default audit.DefaultMaxBytes), and a full trail refuses new records
// rather than dropping old ones: alice's record stays, every call of the
// flood is answered, and each record the trail refused is counted in
// toolbus_audit_records_lost_total (and logged in full by the router).
func TestAttackAuditFloodErasesNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := newDeployment(t, func(c *router.Config) {
		c.Metrics = reg
		c.Guard.Audit = &audit.Config{MaxBytes: 32 << 10}
	})
	d.startWorker()
	if _, err := d.conn("session-s1").client().Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}}}); err != nil {
		t.Fatal(err)
	}
	attacker := d.conn("session-s2").client()
	calls := make([]bus.Call, 64)
	for i := range calls {
		calls[i] = bus.Call{ID: fmt.Sprintf("c%d", i), Name: "nothing_here"}
	}
	const batches = 10 // 640 records, about 200 KiB
	for range batches {
		rep, err := attacker.Call(testCtx(t), "s2", bus.Batch{Calls: calls})
		if err != nil || len(rep.Results) != len(calls) {
			t.Fatalf("a batch of the flood: %v", err)
		}
	}
	var lost float64
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "toolbus_audit_records_lost_total" {
			lost = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	js := testkit.JetStream(t, d.conn("operator").nc)
	alice, flood := 0, 0
	must(t, audit.Export(testCtx(t), js, bus.NewSubjects(""), audit.Filter{}, func(raw json.RawMessage) error {
		var r audit.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if r.Session == "s1" && r.Tool == "greet" {
			alice++
		} else if r.Session == "s2" {
			flood++
		}
		return nil
	}))
	if alice != 1 || lost == 0 || flood+int(lost) != batches*len(calls) {
		t.Fatalf("after the flood: alice's record %d times, %d of the flood's %d records stored, %v counted lost",
			alice, flood, batches*len(calls), lost)
	}
	t.Logf("%d of the flood's records stored, %v refused and counted lost", flood, lost)
}
