package client

import "testing"

// TestStreamSeq reads the stream sequence of a JetStream message's reply
// subject, in both forms (with and without domain and account hash), and
// nothing from other subjects.
func TestStreamSeq(t *testing.T) {
	for reply, want := range map[string]uint64{
		"$JS.ACK.TOOLBUS_EVENTS.replay-x.1.42.7.1733220000000000000.0":                 42,
		"$JS.ACK.hub.ACCHASH.TOOLBUS_EVENTS.replay-x.1.43.7.1733220000000000000.0.rnd": 43,
		"_INBOX.agent.x": 0,
		"$JS.ACK.TOOLBUS_EVENTS.replay-x.1.x.7.1.0": 0,
		"$JS.ACK.short": 0,
		"":              0,
	} {
		got, ok := streamSeq(reply)
		if got != want || ok != (want != 0) {
			t.Errorf("streamSeq(%q) = %d %v, want %d", reply, got, ok, want)
		}
	}
}

func FuzzStreamSeq(f *testing.F) {
	f.Add("$JS.ACK.S.c.1.42.7.1.0")
	f.Fuzz(func(t *testing.T, reply string) { _, _ = streamSeq(reply) })
}
