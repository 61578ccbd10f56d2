package offload_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// TestAttackTinyChunks (session 38, red team): a worker stores its call's
// output in the object store's layout but in 1-byte chunks (any chunk size
// is its own choice): 2,000 chunks for 2,000 bytes. The router sealed it,
// and the first read of it walked every chunk, one stream read each,
// 2,000 reads where 128 KiB chunks (protocol 5.9's layout) take one; with
// --outputs-max-bytes (no bound by messages) a 64 MiB output took 67
// million, and each object evicted from the verified cache cost them again.
// An object with more chunks than 128 KiB chunks make is now refused at
// seal (the call's result is a tool_error) and never walked.
func TestAttackTinyChunks(t *testing.T) {
	f := newFixture(t, 1000)
	const n = 2000 // under nats.go's 4,000 async publishes in flight, which Put would stall on
	name := "s1.r1.c1.0123456789abcdef0123456789abcdef.all"
	info, err := f.obs.Put(t.Context(), jetstream.ObjectMeta{Name: name,
		Headers: nats.Header{"Content-Type": []string{"text/plain"}, offload.HeaderSession: []string{"s1"}, offload.HeaderCall: []string{"s1.r1.c1"}},
		Opts:    &jetstream.ObjectMetaOptions{ChunkSize: 1}}, bytes.NewReader(bytes.Repeat([]byte("x"), n)))
	if err != nil {
		t.Fatal(err)
	}
	if info.Chunks != n {
		t.Fatalf("%d chunks", info.Chunks)
	}
	ref := bus.Block{Type: bus.BlockData, MediaType: "text/plain", URL: "nats-object://o_outputs/" + name}
	start := time.Now()
	out, err := f.st.Seal(t.Context(), "s1.r1.c1", []bus.Block{ref})
	if err == nil {
		_, rerr := f.srv.Serve(t.Context(), "s1", offload.Get{URL: out[0].URL, Max: 10})
		t.Fatalf("an object of %d one-byte chunks sealed; its first read (%v) took %v", n, rerr, time.Since(start))
	}
	if be := (*offload.BlockError)(nil); !errors.As(err, &be) || !strings.Contains(err.Error(), "chunks") {
		t.Fatalf("seal: %v", err)
	}
	// The same bytes in the layout's chunks are sealed and served.
	good := f.store(t, "s1.r2.c1", strings.Repeat("x", n))
	if _, err := f.st.Seal(t.Context(), "s1.r2.c1", []bus.Block{good}); err != nil {
		t.Fatal(err)
	}
}

// TestAttack38bPastTheCeiling (session 38, second red team): a worker's
// object whose metadata says more bytes than the 64 MiB output ceiling
// (here metadata rewritten over a small object: its size and chunks as
// 128 KiB chunks make them) was sealed into its call's result; only
// P_outputs' bound stopped a worker storing up to 4.25 GiB a call. It is
// now refused at seal like tiny chunks, and, being the call's own (its
// name and headers), deleted with its chunks; refused tiny chunks alike.
func TestAttack38bPastTheCeiling(t *testing.T) {
	f := newFixture(t, 1000)
	put := func(key string, chunk int) string {
		name := key + ".0123456789abcdef0123456789abcdef.all"
		_, err := f.obs.Put(t.Context(), jetstream.ObjectMeta{Name: name,
			Headers: nats.Header{"Content-Type": []string{"text/plain"}, offload.HeaderSession: []string{"s1"}, offload.HeaderCall: []string{key}},
			Opts:    &jetstream.ObjectMetaOptions{ChunkSize: uint32(chunk)}}, bytes.NewReader(bytes.Repeat([]byte("x"), 3000)))
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	big := put("s1.r1.c1", 128<<10)
	info, err := f.obs.GetInfo(t.Context(), big)
	if err != nil {
		t.Fatal(err)
	}
	info.Size, info.Chunks = offload.DefaultMaxOutput+1, offload.DefaultMaxOutput/(128<<10)+1
	meta, _ := json.Marshal(info)
	m := nats.NewMsg("$O.o_outputs.M." + base64.URLEncoding.EncodeToString([]byte(big)))
	m.Data = meta
	m.Header.Set("Nats-Rollup", "sub")
	if _, err := f.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, name, want string }{
		{"s1.r1.c1", big, "ceiling"},
		{"s1.r2.c1", put("s1.r2.c1", 1), "chunks"},
	} {
		ref := bus.Block{Type: bus.BlockData, MediaType: "text/plain", URL: "nats-object://o_outputs/" + tc.name}
		if _, err := f.st.Seal(t.Context(), tc.key, []bus.Block{ref}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: seal: %v, want a refusal naming the %s", tc.key, err, tc.want)
		}
		if _, err := f.obs.GetInfo(t.Context(), tc.name); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatalf("%s: the refused object is kept: %v", tc.key, err)
		}
	}
	st, err := f.js.Stream(t.Context(), "OBJ_o_outputs")
	if err != nil {
		t.Fatal(err)
	}
	if si, err := st.Info(t.Context(), jetstream.WithSubjectFilter("$O.o_outputs.C.>")); err != nil || len(si.State.Subjects) != 0 {
		t.Fatalf("chunks kept: %v %v", si.State.Subjects, err)
	}
}
