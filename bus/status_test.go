package bus

import "testing"

func TestStatusLive(t *testing.T) {
	st := Status{Tools: []ToolStatus{{Name: "w", LiveWorkers: 1}, {Name: "x", External: true}, {Name: "dead"}}}
	for _, tc := range []struct {
		names []string
		ok    bool
	}{
		{nil, true},
		{[]string{"w", "x"}, true},
		{[]string{"w", "dead"}, false},
		{[]string{"missing"}, false},
	} {
		if err := st.CheckLive(tc.names...); (err == nil) != tc.ok {
			t.Errorf("CheckLive(%v) = %v, want ok=%v", tc.names, err, tc.ok)
		}
	}
	if st.Live("dead") || st.Live("missing") || !st.Live("x") {
		t.Error("Live disagrees with the tools' states")
	}
}
