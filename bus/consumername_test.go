package bus_test

import (
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestConsumerName: a router-made consumer's name is its kind and 128
// random bits (26 lowercase base32 characters), different every time;
// ValidConsumerName accepts exactly that form, nothing that could add a
// token or a wildcard to a JetStream API subject.
func TestConsumerName(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		n := bus.NewConsumerName("replay")
		if !bus.ValidConsumerName("replay", n) || bus.ValidConsumerName("handoff", n) || seen[n] {
			t.Fatalf("name %q (seen %v)", n, seen[n])
		}
		seen[n] = true
	}
	for _, bad := range []string{"", "replay-", "replay-abc", "replay-aaaaaaaaaaaaaaaaaaaaaaaaaa.x", "replay-*", "replay->",
		"replay-AAAAAAAAAAAAAAAAAAAAAAAAAA", "replay-aaaaaaaaaaaaaaaaaaaaaaaaa1", "replay-aaaaaaaaaaaaaaaaaaaaaaaaaaa", "x-aaaaaaaaaaaaaaaaaaaaaaaaaa",
		"replay-aaaaaaaaaaaaaaaaaaaaaaaaa."} {
		if bus.ValidConsumerName("replay", bad) {
			t.Errorf("ValidConsumerName accepted %q", bad)
		}
	}
}

func FuzzValidConsumerName(f *testing.F) {
	f.Add(bus.NewConsumerName("replay"))
	f.Add("replay-*")
	f.Fuzz(func(t *testing.T, name string) {
		if !bus.ValidConsumerName("replay", name) {
			return
		}
		for _, c := range name {
			if c == '.' || c == '*' || c == '>' || c == ' ' || c > 127 {
				t.Fatalf("accepted %q", name)
			}
		}
		if len(name) != len("replay-")+26 {
			t.Fatalf("accepted %q", name)
		}
	})
}
