package rcache

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestAttack37CacheBytesBounded: an agent calling a cached tool with a new
// input each time has every result stored (up to MaxEntry each, for up to
// 24 h). The bucket keeps at most MaxBytes: the oldest entries go first,
// and what was stored last is still served.
func TestAttack37CacheBytesBounded(t *testing.T) {
	js := testkit.JetStream(t, testkit.Connect(t, testkit.RunServer(t)))
	const bound = 2 << 20
	c, err := New(t.Context(), js, bus.NewSubjects(bus.DefaultPrefix), Config{MaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	d := def(ScopeGlobal)
	big := strings.Repeat("x", 200<<10)
	var keys []string
	for i := range 40 { // 8 MB of results, four times the bound
		key, _ := Key(d, "s1", "", json.RawMessage(fmt.Sprintf(`{"q":%d}`, i)))
		if !c.Put(t.Context(), key, MaxTTL, ok(big)) {
			t.Fatalf("result %d not stored", i)
		}
		keys = append(keys, key)
	}
	st, err := js.Stream(t.Context(), "KV_"+bus.NewSubjects(bus.DefaultPrefix).Bucket(Bucket))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > bound {
		t.Fatalf("the cache holds %d bytes of 40 results, past its bound of %d", info.State.Bytes, bound)
	}
	if _, hit := c.Get(t.Context(), keys[len(keys)-1]); !hit {
		t.Fatal("the newest result is not served")
	}
	if _, hit := c.Get(t.Context(), keys[0]); hit {
		t.Fatal("the oldest result is still served past the bound")
	}
	// A router started with a smaller bound brings the bucket under it.
	if _, err := New(t.Context(), js, bus.NewSubjects(bus.DefaultPrefix), Config{MaxBytes: bound / 2}); err != nil {
		t.Fatal(err)
	}
	if info, err = st.Info(t.Context()); err != nil || info.State.Bytes > bound/2 {
		t.Fatalf("the cache holds %d bytes past a new bound of %d (%v)", info.State.Bytes, bound/2, err)
	}
}
