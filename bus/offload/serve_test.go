package offload_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/internal/testkit"
)

// fixture is one server with an outputs bucket, an offloader and the
// router's store and server on it.
type fixture struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	obs jetstream.ObjectStore
	off *offload.Offloader
	st  *offload.Store
	srv *offload.Server
}

func newFixture(t *testing.T, inline int) *fixture {
	t.Helper()
	s := testkit.RunServer(t)
	nc := testkit.Connect(t, s)
	js := testkit.JetStream(t, nc)
	obs, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "o_outputs", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	off, err := offload.New(nc, "o_outputs", offload.Limits{Inline: inline, Max: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	st := offload.NewStore(nc, "o_outputs")
	return &fixture{nc: nc, js: js, obs: obs, off: off, st: st, srv: offload.NewServer(st, offload.Window(nc.MaxPayload()))}
}

// store fits text for call key and returns the reference block.
func (f *fixture) store(t *testing.T, key, text string) bus.Block {
	t.Helper()
	out, err := f.off.Fit(t.Context(), key, bus.Text(text), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("not stored: %+v", out)
	}
	return out[1]
}

// read reads a whole object through the server, window by window.
func (f *fixture) read(ctx context.Context, session, ref string) ([]byte, error) {
	var out []byte
	for {
		c, err := f.srv.Serve(ctx, session, offload.Get{URL: ref, Offset: int64(len(out))})
		if err != nil {
			return nil, err
		}
		out = append(out, c.Data...)
		if int64(len(out)) >= c.Size || len(c.Data) == 0 {
			return out, nil
		}
	}
}

func wantCode(t *testing.T, err error, code, text string) {
	t.Helper()
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != code || !strings.Contains(be.Message, text) {
		t.Fatalf("got %v, want %s containing %q", err, code, text)
	}
}

// TestStoredObjects: what the offloader writes is a plain object (nats.go's
// object store reads it, headers and digest included), bound to its call
// by name and headers, and its reference carries its digest.
func TestStoredObjects(t *testing.T) {
	f := newFixture(t, 1000)
	text := strings.Repeat("x", 300<<10) // three chunks
	ref := f.store(t, "s1.r1.c1", text)
	r, err := offload.ParseRef(ref.URL)
	if err != nil || !strings.HasPrefix(r.Name, "s1.r1.c1.") || len(r.Digest) != 64 || ref.Size != int64(len(text)) {
		t.Fatalf("reference %+v %v", ref, err)
	}
	if tok := strings.Split(r.Name, ".")[3]; len(tok) != 32 {
		t.Errorf("random part %q is not 128 bits of hex", tok)
	}
	res, err := f.obs.Get(t.Context(), r.Name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res)
	if err != nil || string(b) != text {
		t.Fatalf("nats.go read %d bytes, %v", len(b), err)
	}
	info, _ := res.Info()
	if h := nats.Header(info.Headers); h.Get(offload.HeaderSession) != "s1" || h.Get(offload.HeaderCall) != "s1.r1.c1" || h.Get("Content-Type") == "" {
		t.Errorf("headers %v", info.Headers)
	}
	// Sealing: the call's own reference passes (digest kept); another
	// call's key, a foreign bucket, a missing object are refused.
	out, err := f.st.Seal(t.Context(), "s1.r1.c1", []bus.Block{{Type: bus.BlockText, Text: "t"}, ref})
	if err != nil || out[1].URL != ref.URL {
		t.Fatalf("seal: %+v %v", out, err)
	}
	for _, tc := range []struct {
		key, url, want string
	}{
		{"s2.r1.c1", ref.URL, "does not start with the call's key"},
		{"s1.r1.c2", ref.URL, "does not start with the call's key"},
		{"s1.r1.c1", "nats-object://other/s1.r1.c1.x.0", "is not in the outputs object store"},
		{"s1.r1.c1", "nats-object://o_outputs/s1.r1.c1.nope.0", "no such object"},
		{"s1.r1.c1", "nats-object://o_outputs/x#y", "after '#'"},
	} {
		_, err := f.st.Seal(t.Context(), tc.key, []bus.Block{{Type: bus.BlockData, MediaType: "text/plain", URL: tc.url}})
		var be *offload.BlockError
		if !errors.As(err, &be) || be.Index != 0 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("seal %s of %s: %v, want %q", tc.url, tc.key, err, tc.want)
		}
	}
	// An object named with the call's prefix but stored by someone else
	// (headers for another session) is refused too.
	if _, err := f.obs.Put(t.Context(), jetstream.ObjectMeta{Name: "s1.r1.c1.forged.0",
		Headers: nats.Header{offload.HeaderSession: []string{"s2"}, offload.HeaderCall: []string{"s2.r1.c1"}}}, strings.NewReader("forged")); err != nil {
		t.Fatal(err)
	}
	_, err = f.st.Seal(t.Context(), "s1.r1.c1", []bus.Block{{Type: bus.BlockData, MediaType: "text/plain", URL: "nats-object://o_outputs/s1.r1.c1.forged.0"}})
	if !errors.Is(err, offload.ErrNotThisCall) || !strings.Contains(err.Error(), "was not stored for this call") {
		t.Errorf("seal of a forged prefix: %v", err)
	}
}

// TestServe: the read verb serves a session's own object window by
// window, byte for byte; refuses another session's exactly as a missing
// one, a reference without digest, a foreign bucket, an offset past the
// end; and never serves an overwritten object, whether the forger
// replaced it openly or kept the recorded digest in forged metadata.
func TestServe(t *testing.T) {
	f := newFixture(t, 1000)
	text := strings.Repeat("0123456789", 150<<10) // 1.5 MiB: three windows
	ref := f.store(t, "s1.r1.c1", text)
	got, err := f.read(t.Context(), "s1", ref.URL)
	if err != nil || string(got) != text {
		t.Fatalf("read %d bytes, equal %v, %v", len(got), string(got) == text, err)
	}
	c, err := f.srv.Serve(t.Context(), "s1", offload.Get{URL: ref.URL, Offset: 1000, Max: 10})
	if err != nil || string(c.Data) != text[1000:1010] || c.Size != int64(len(text)) || c.MediaType != "text/plain; charset=utf-8" {
		t.Fatalf("window at 1000: %+v %v", c, err)
	}
	if c, err := f.srv.Serve(t.Context(), "s1", offload.Get{URL: ref.URL, Offset: int64(len(text))}); err != nil || len(c.Data) != 0 {
		t.Fatalf("window at the end: %+v %v", c, err)
	}
	r, _ := offload.ParseRef(ref.URL)
	noDigest := offload.Ref{Bucket: r.Bucket, Name: r.Name}.String()
	for _, tc := range []struct {
		session string
		g       offload.Get
		code    string
		text    string
	}{
		{"s2", offload.Get{URL: ref.URL}, bus.CodeBadRequest, "no output"},
		{"s1", offload.Get{URL: noDigest}, bus.CodeBadRequest, "has no #sha256="},
		{"s1", offload.Get{URL: "nats-object://toolbus_skills/s1.x"}, bus.CodeBadRequest, "only stored outputs of o_outputs"},
		{"s1", offload.Get{URL: ref.URL, Offset: int64(len(text)) + 1}, bus.CodeBadRequest, "past the end"},
		{"s1", offload.Get{URL: "https://x"}, bus.CodeBadRequest, "not a nats-object"},
		{"s1", offload.Get{URL: strings.Replace(ref.URL, r.Digest, strings.Repeat("0", 64), 1)}, bus.CodeInternal, "overwritten"},
	} {
		_, err := f.srv.Serve(t.Context(), tc.session, tc.g)
		wantCode(t, err, tc.code, tc.text)
	}
	// Another session's object, even renamed into s2's prefix by a
	// forger, is "no output": its headers name s1.
	other := f.store(t, "s2.r1.c1", text)
	if _, err := f.srv.Serve(t.Context(), "s1", offload.Get{URL: other.URL}); err == nil {
		t.Fatal("s1 read s2's output")
	}

	// Open overwrite: a worker that knows the name replaces the object.
	victim := f.store(t, "s1.r2.c1", text)
	vr, _ := offload.ParseRef(victim.URL)
	if _, err := f.read(t.Context(), "s1", victim.URL); err != nil {
		t.Fatal(err) // served once: the server remembers it verified
	}
	if _, err := f.obs.Put(t.Context(), jetstream.ObjectMeta{Name: vr.Name,
		Headers: nats.Header{offload.HeaderSession: []string{"s1"}, offload.HeaderCall: []string{"s1.r2.c1"}}}, strings.NewReader("forged")); err != nil {
		t.Fatal(err)
	}
	// The server that verified it serves the verified chunks or, as here
	// where the forger could purge them (a worker cannot), nothing; one
	// that had not (another router) refuses the forgery. Never the forgery.
	if got, err := f.read(t.Context(), "s1", victim.URL); err == nil && string(got) != text {
		t.Fatalf("the verifying server served %q after the overwrite", got)
	}
	fresh := offload.NewServer(f.st, 1<<20)
	_, err = fresh.Serve(t.Context(), "s1", offload.Get{URL: victim.URL})
	wantCode(t, err, bus.CodeInternal, "was overwritten after its result")

	// Crafted overwrite: forged chunks under metadata that repeats the
	// recorded digest and size.
	victim = f.store(t, "s1.r3.c1", text)
	vr, _ = offload.ParseRef(victim.URL)
	forged := bytes.Repeat([]byte("F"), len(text))
	info, err := f.obs.Put(t.Context(), jetstream.ObjectMeta{Name: "scratch"}, bytes.NewReader(forged))
	if err != nil {
		t.Fatal(err)
	}
	meta, err := f.st.Info(t.Context(), vr.Name)
	if err != nil {
		t.Fatal(err)
	}
	meta.NUID = info.NUID // point the victim's metadata at the forged chunks
	raw, _ := json.Marshal(meta.ObjectInfo)
	m := nats.NewMsg(offload.MetaSubject("o_outputs", vr.Name))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data = raw
	if _, err := f.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	_, err = f.srv.Serve(t.Context(), "s1", offload.Get{URL: victim.URL})
	wantCode(t, err, bus.CodeInternal, "was overwritten after its result")
	// The operator's direct read refuses it too, at the end of the read.
	obj, err := f.st.Open(t.Context(), victim.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(obj); err == nil || !strings.Contains(err.Error(), "does not match its digest") {
		t.Fatalf("direct read of a forgery: %v", err)
	}
}

// TestInfoRetriesNotFound: an object that appears shortly after the read
// starts is found (a leader catching up); one that never does is "not
// found" within NotFoundRetry and a little.
func TestInfoRetriesNotFound(t *testing.T) {
	f := newFixture(t, 1000)
	start := time.Now()
	if _, err := f.st.Info(t.Context(), "s1.nothing"); !errors.Is(err, offload.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if d := time.Since(start); d > offload.NotFoundRetry+5*time.Second {
		t.Errorf("not found after %v", d)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stored := make(chan error, 1)
	go func() {
		_, err := f.obs.PutString(ctx, "s1.late", "late")
		stored <- err
	}()
	if _, err := f.st.Info(ctx, "s1.late"); err != nil {
		t.Fatalf("late object: %v", err)
	}
	if err := <-stored; err != nil {
		t.Fatal(err)
	}
}

// TestNoRollupPreventsOverwrite: on an outputs stream that does not
// allow rollups (allow_rollup_hdrs false), the offloader still writes,
// a forger's rollup (of one subject, or of the whole stream) is refused by
// JetStream, and metadata published after the writer's changes nothing:
// the original is served, byte for byte. NATS then prevents the overwrite
// instead of toolbus detecting it.
func TestNoRollupPreventsOverwrite(t *testing.T) {
	f := newFixture(t, 1000)
	f.noRollups(t)
	text := strings.Repeat("original ", 50<<10)
	victim := f.store(t, "s1.r1.c1", text)
	r, _ := offload.ParseRef(victim.URL)
	for _, rollup := range []string{jetstream.MsgRollupSubject, jetstream.MsgRollupAll} {
		m := nats.NewMsg(offload.MetaSubject("o_outputs", r.Name))
		m.Header.Set(jetstream.MsgRollup, rollup)
		m.Data = []byte(`{"name":"` + r.Name + `","nuid":"x","size":1,"chunks":1,"digest":"SHA-256=AAAA"}`)
		if _, err := f.js.PublishMsg(t.Context(), m); err == nil || !strings.Contains(err.Error(), "rollup not permitted") {
			t.Fatalf("a rollup %s: %v", rollup, err)
		}
	}
	// Forged metadata without a rollup is kept beside the original, which
	// stays the first message on the subject.
	info, err := f.st.Info(t.Context(), r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.obs.PutString(t.Context(), r.Name, "forged"); err == nil {
		t.Fatal("nats.go's Put (which sends a rollup) replaced the object")
	}
	forged := info.ObjectInfo
	forged.NUID = "forged"
	raw, _ := json.Marshal(forged)
	if _, err := f.js.PublishMsg(t.Context(), &nats.Msg{Subject: "$O.o_outputs.C.forged", Data: []byte(strings.Repeat("F", len(text)))}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.js.PublishMsg(t.Context(), &nats.Msg{Subject: offload.MetaSubject("o_outputs", r.Name), Data: raw}); err != nil {
		t.Fatal(err)
	}
	got, err := f.read(t.Context(), "s1", victim.URL)
	if err != nil || string(got) != text {
		t.Fatalf("after a forged overwrite: %d bytes, equal %v, %v", len(got), string(got) == text, err)
	}
}

// BenchmarkServe20MiB reads a 20 MiB output through the read verb's
// server, window by window, as a router serves it: the first read
// verifies the whole object, the later ones only read it.
func BenchmarkServe20MiB(b *testing.B) {
	s := testkit.RunServer(b)
	nc := testkit.Connect(b, s)
	js := testkit.JetStream(b, nc)
	if _, err := js.CreateObjectStore(b.Context(), jetstream.ObjectStoreConfig{Bucket: "o_outputs", Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	off, _ := offload.New(nc, "o_outputs", offload.Limits{Inline: 1000, Max: 64 << 20})
	text := strings.Repeat("0123456789abcdef", 20<<16)
	out, err := off.Fit(b.Context(), "s1.r1.c1", bus.Text(text), 0, false)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		f := &fixture{srv: offload.NewServer(offload.NewStore(nc, "o_outputs"), offload.Window(nc.MaxPayload()))}
		got, err := f.read(b.Context(), "s1", out[1].URL)
		if err != nil || len(got) != len(text) {
			b.Fatal(len(got), err)
		}
	}
}

// noRollups makes the outputs stream refuse rollups, as routers make it
// (protocol 5.9), and returns it.
func (f *fixture) noRollups(t *testing.T) jetstream.Stream {
	t.Helper()
	s, err := f.js.Stream(t.Context(), "OBJ_o_outputs")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowRollup = false
	if _, err := f.js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatalf("no rollups on the outputs stream: %v", err)
	}
	return s
}
