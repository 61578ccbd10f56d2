package offload_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/testkit"
)

func TestParseRef(t *testing.T) {
	d := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		ref  string
		want offload.Ref
	}{
		{"nats-object://toolbus_outputs/s1.r1.c1.X.0", offload.Ref{Bucket: "toolbus_outputs", Name: "s1.r1.c1.X.0"}},
		{"nats-object://b/a%2Fb%20c", offload.Ref{Bucket: "b", Name: "a/b c"}},
		{"nats-object://b/a/b", offload.Ref{Bucket: "b", Name: "a/b"}},
		{"nats-object://b/a%23b#sha256=" + d, offload.Ref{Bucket: "b", Name: "a#b", Digest: d}},
	} {
		r, err := offload.ParseRef(tc.ref)
		if err != nil || r != tc.want {
			t.Errorf("ParseRef(%q) = %+v, %v", tc.ref, r, err)
		}
		if r.String() != tc.ref && !strings.Contains(r.Name, "/") {
			t.Errorf("%+v.String() = %q, want %q", r, r.String(), tc.ref)
		}
	}
	for _, bad := range []string{"", "https://x/y", "nats-object://", "nats-object://b", "nats-object://b/", "nats-object://b.c/x",
		"nats-object://b/%zz", "nats-object://b/x#", "nats-object://b/x#sha256=", "nats-object://b/x#sha256=" + strings.ToUpper(d),
		"nats-object://b/x#md5=" + d, "nats-object://b/x#sha256=" + d + "0", "nats-object://b/" + strings.Repeat("x", offload.MaxRefLen)} {
		if _, err := offload.ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) accepted", bad)
		}
	}
}

// FuzzParseRef: never a panic; what parses is rebuilt by String into a
// reference that parses to the same bucket, name and digest.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"nats-object://toolbus_outputs/s1.r1.c1.X.0", "nats-object://b/a%2Fb", "nats-object://b/%", "nats-object:///x", "x",
		"nats-object://b/n#sha256=" + strings.Repeat("ab", 32), "nats-object://b/n#x#y", "nats-object://b/%23#sha256=00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		r, err := offload.ParseRef(ref)
		if err != nil {
			return
		}
		if r.Bucket == "" || r.Name == "" || (r.Digest != "" && len(r.Digest) != 64) {
			t.Fatalf("%q parsed to %+v", ref, r)
		}
		r2, err := offload.ParseRef(r.String())
		if err != nil || r2 != r {
			t.Fatalf("%q -> %+v -> %q -> %+v %v", ref, r, r.String(), r2, err)
		}
	})
}

// TestFit checks the offloader against a real object store: what fits
// stays, the largest block goes first, previews stay within the limit,
// many small blocks go as one JSON object, and the ceiling refuses.
func TestFit(t *testing.T) {
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	js := testkit.JetStream(t, nc)
	if _, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "o_outputs", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	o, err := offload.New(nc, "o_outputs", offload.Limits{Inline: 2000, Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	st := offload.NewStore(nc, "o_outputs")
	fetch := func(ref string) string {
		obj, err := st.Open(t.Context(), ref)
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
	if out, err := o.Fit(t.Context(), "s.r.k", small, 0, false); err != nil || len(out) != 1 || out[0].Text != "hello" {
		t.Fatalf("small output: %v %v", out, err)
	}
	big, mid := strings.Repeat("a", 3000), strings.Repeat("b", 600)
	out, err := o.Fit(t.Context(), "s.r.k", []bus.Block{{Type: bus.BlockText, Text: mid}, {Type: bus.BlockText, Text: big}}, 0, false)
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
	if out, err := o.Fit(t.Context(), "s.r.k", bus.Text(errText), 0, false); err != nil || len(out) != 1 {
		t.Fatalf("a success result of 1200 bytes: %+v %v", out, err)
	}
	out, err = o.Fit(t.Context(), "s.r.k", bus.Text(errText), 0, true)
	if err != nil || len(out) != 2 || fetch(out[1].URL) != errText {
		t.Fatalf("error result: %+v %v", out, err)
	}
	// 600 blocks of 5 bytes: no single block is worth storing.
	many := make([]bus.Block, 600)
	for i := range many {
		many[i] = bus.Block{Type: bus.BlockText, Text: "12345"}
	}
	out, err = o.Fit(t.Context(), "s.r.k", many, 0, false)
	if err != nil || len(out) != 2 || out[1].MediaType != "application/json" || !strings.HasPrefix(fetch(out[1].URL), `[{"type":"text","text":"12345"}`) {
		t.Fatalf("many blocks: %+v %v", out, err)
	}
	_, err = o.Fit(t.Context(), "s.r.k", bus.Text(strings.Repeat("x", 100001)), 0, false)
	var tl *offload.TooLargeError
	if !errors.As(err, &tl) || tl.Max != 100000 {
		t.Fatalf("above the ceiling: %v", err)
	}
	// A missing bucket is a clear error.
	o2, _ := offload.New(nc, "missing_outputs", offload.Limits{Inline: 10})
	if _, err := o2.Fit(t.Context(), "s.r.k", bus.Text(big), 0, false); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}
	if _, err := st.Open(t.Context(), "nats-object://o_outputs/nope"); err == nil || !strings.Contains(err.Error(), "no such object") {
		t.Fatalf("missing object: %v", err)
	}
}

// FuzzBound: the fast path's bound is never below the encoded size.
func FuzzBound(f *testing.F) {
	f.Add("text", "a\"\\\x00\u2028<>&é\xff", "", "", "", int64(0), true)
	f.Add("data", "", "image/png", "iVBO", "", int64(5), false)
	f.Add("data", "", "text/plain", "", "nats-object://x", int64(-1)<<63, false)
	f.Fuzz(func(t *testing.T, typ, text, media, data, url string, size int64, dup bool) {
		p := float64(size) / 3 // annotations and every other member (session 34)
		a := &bus.Annotations{Audience: []string{text, url}, Priority: &p, LastModified: data}
		out := []bus.Block{{Type: typ, Text: text, MediaType: media, Data: data, URL: url, Size: size},
			{Type: bus.BlockText, Text: text}, {Type: typ, URI: url, Name: text, Title: media, Description: data, Size: size, Annotations: a}}
		if b, n := offload.Bound(out, dup), offload.Size(out, dup); b < n {
			t.Fatalf("bound %d below size %d for %+v", b, n, out)
		}
	})
}

// TestHeadTail: a stored text keeps its beginning and its end inline,
// within the preview's bytes, with its size, digest and reference, cut at
// runes (issue 29).
func TestHeadTail(t *testing.T) {
	digest := strings.Repeat("c", 64)
	ref := bus.Block{Type: bus.BlockData, URL: "nats-object://o/s.r.k.t.0#sha256=" + digest, Size: 1}
	text := "HEAD" + strings.Repeat("é", 5000) + "TAIL"
	got := offload.HeadTail(text, 2048, ref)
	if !strings.HasPrefix(got, "HEAD") || !strings.Contains(got, "TAIL\n[The whole text, 10008 bytes (sha256 "+digest+")") ||
		!strings.Contains(got, ref.URL) || !strings.Contains(got, "read_output") || !utf8.ValidString(got) {
		t.Fatalf("preview %q", got)
	}
	if len(got) > 2048+200 {
		t.Fatalf("preview of %d bytes", len(got))
	}
	short := offload.HeadTail("ab", 2048, ref)
	if !strings.HasPrefix(short, "ab\n[… 0 bytes left out …]\n\n") {
		t.Fatalf("short %q", short)
	}
}
