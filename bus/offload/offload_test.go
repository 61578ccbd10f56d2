package offload_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/offload"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ ref, bucket, name string }{
		{"nats-object://toolbus_outputs/s1.r1.c1.X.0", "toolbus_outputs", "s1.r1.c1.X.0"},
		{"nats-object://b/a%2Fb%20c", "b", "a/b c"},
		{"nats-object://b/a/b", "b", "a/b"},
	} {
		b, n, err := offload.ParseURL(tc.ref)
		if err != nil || b != tc.bucket || n != tc.name {
			t.Errorf("ParseURL(%q) = %q, %q, %v", tc.ref, b, n, err)
		}
	}
	for _, bad := range []string{"", "https://x/y", "nats-object://", "nats-object://b", "nats-object://b/", "nats-object://b.c/x", "nats-object://b/%zz"} {
		if _, _, err := offload.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) accepted", bad)
		}
	}
}

// FuzzParseURL: never a panic; what parses is rebuilt by URL into a
// reference that parses to the same bucket and name.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"nats-object://toolbus_outputs/s1.r1.c1.X.0", "nats-object://b/a%2Fb", "nats-object://b/%", "nats-object:///x", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		b, n, err := offload.ParseURL(ref)
		if err != nil {
			return
		}
		b2, n2, err := offload.ParseURL(offload.URL(b, n))
		if err != nil || b2 != b || n2 != n {
			t.Fatalf("%q -> %q %q -> %q %q %v", ref, b, n, b2, n2, err)
		}
	})
}

// TestFit checks the offloader against a real object store: what fits
// stays, the largest block goes first, previews stay within the limit,
// many small blocks go as one JSON object, and the ceiling refuses.
func TestFit(t *testing.T) {
	s := bustest.RunServer(t)
	nc := bustest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "o_outputs", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	o, err := offload.New(nc, "o_outputs", offload.Limits{Inline: 2000, Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(ref string) string {
		obj, err := offload.Open(t.Context(), js, ref)
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		b, err := io.ReadAll(obj)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	small := bus.Text("hello")
	if out, err := o.Fit(t.Context(), "k", small, 0, false); err != nil || len(out) != 1 || out[0].Text != "hello" {
		t.Fatalf("small output: %v %v", out, err)
	}
	big, mid := strings.Repeat("a", 3000), strings.Repeat("b", 600)
	out, err := o.Fit(t.Context(), "k", []bus.Block{{Type: bus.BlockText, Text: mid}, {Type: bus.BlockText, Text: big}}, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out[0].Text != mid || out[2].Size != 3000 || fetch(out[2].URL) != big {
		t.Fatalf("out %+v", out)
	}
	if n := offload.Size(out, false); n > 2000 {
		t.Errorf("fitted output is %d bytes", n)
	}
	// An error result counts its text twice: 1200 bytes spill at 2000.
	errText := strings.Repeat("e", 1200)
	if out, err := o.Fit(t.Context(), "k", bus.Text(errText), 0, false); err != nil || len(out) != 1 {
		t.Fatalf("a success result of 1200 bytes: %+v %v", out, err)
	}
	out, err = o.Fit(t.Context(), "k", bus.Text(errText), 0, true)
	if err != nil || len(out) != 2 || fetch(out[1].URL) != errText {
		t.Fatalf("error result: %+v %v", out, err)
	}
	// 600 blocks of 5 bytes: no single block is worth storing.
	many := make([]bus.Block, 600)
	for i := range many {
		many[i] = bus.Block{Type: bus.BlockText, Text: "12345"}
	}
	out, err = o.Fit(t.Context(), "k", many, 0, false)
	if err != nil || len(out) != 2 || out[1].MediaType != "application/json" || !strings.HasPrefix(fetch(out[1].URL), `[{"type":"text","text":"12345"}`) {
		t.Fatalf("many blocks: %+v %v", out, err)
	}
	_, err = o.Fit(t.Context(), "k", bus.Text(strings.Repeat("x", 100001)), 0, false)
	var tl *offload.TooLargeError
	if !errors.As(err, &tl) || tl.Max != 100000 {
		t.Fatalf("above the ceiling: %v", err)
	}
	// A missing bucket is a clear error.
	o2, _ := offload.New(nc, "missing_outputs", offload.Limits{Inline: 10})
	if _, err := o2.Fit(t.Context(), "k", bus.Text(big), 0, false); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}
	if _, err := offload.Open(t.Context(), js, "nats-object://o_outputs/nope"); err == nil || !strings.Contains(err.Error(), "no such object") {
		t.Fatalf("missing object: %v", err)
	}
}

// FuzzBound: the fast path's bound is never below the encoded size.
func FuzzBound(f *testing.F) {
	f.Add("text", "a\"\\\x00\u2028<>&é\xff", "", "", "", int64(0), true)
	f.Add("data", "", "image/png", "iVBO", "", int64(5), false)
	f.Fuzz(func(t *testing.T, typ, text, media, data, url string, size int64, dup bool) {
		out := []bus.Block{{Type: typ, Text: text, MediaType: media, Data: data, URL: url, Size: size}, {Type: bus.BlockText, Text: text}}
		if b, n := offload.Bound(out, dup), offload.Size(out, dup); b < n {
			t.Fatalf("bound %d below size %d for %+v", b, n, out)
		}
	})
}
