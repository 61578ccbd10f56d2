package bus_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

func TestSetupIdempotent(t *testing.T) {
	s := bustest.RunServer(t)
	nc := bustest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := bus.NewSubjects("tb")
	for range 2 {
		st, err := bus.Setup(t.Context(), js, subj, bus.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Sessions.Bucket() != "tb_sessions" {
			t.Fatalf("bucket %s", st.Sessions.Bucket())
		}
	}
	if _, err := js.Stream(t.Context(), "TB_EVENTS"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(t.Context(), "TB_HANDOFF"); err != nil {
		t.Fatal(err)
	}
}
