package offload_test

import (
	"bytes"
	"crypto/sha256"
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

// TestAttack38bPastTheCeiling (session 38, second red team): a worker
// publishes its call's object itself (chunks, then metadata: all a writer
// may do) with metadata saying more bytes than the 64 MiB output ceiling.
// The router sealed it into the call's result; only P_outputs' bound
// stopped a worker storing up to 4.25 GiB a call. It is now refused at
// seal like tiny chunks, and, being the call's own (its name and
// headers), purged with its chunks; refused tiny chunks alike. A refused
// object whose metadata names a wildcard for its chunks takes no other
// object's with it. (Naming another object's chunks needs its NUID, 128
// random bits that writers cannot read.)
func TestAttack38bPastTheCeiling(t *testing.T) {
	f := newFixture(t, 1000)
	st := f.noRollups(t)
	victim := f.store(t, "s2.r1.c1", strings.Repeat("v", 3000))
	vref, err := offload.ParseRef(victim.URL)
	if err != nil {
		t.Fatal(err)
	}
	vinfo, err := f.obs.GetInfo(t.Context(), vref.Name)
	if err != nil {
		t.Fatal(err)
	}
	// forge writes an object of call key as a hostile worker would: one
	// chunk of 3,000 bytes on nuid's subject (unless a wildcard),
	// then metadata saying size bytes in chunks.
	forge := func(key, nuid string, size uint64, chunks uint32) string {
		name := key + ".0123456789abcdef0123456789abcdef.all"
		data := bytes.Repeat([]byte("x"), 3000)
		if nuid != ">" {
			if _, err := f.js.Publish(t.Context(), "$O.o_outputs.C."+nuid, data); err != nil {
				t.Fatal(err)
			}
		}
		sum := sha256.Sum256(data)
		meta, _ := json.Marshal(jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: name,
			Headers: nats.Header{"Content-Type": []string{"text/plain"}, offload.HeaderSession: []string{"s1"}, offload.HeaderCall: []string{key}}},
			Bucket: "o_outputs", NUID: nuid, Size: size, Chunks: chunks, Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])})
		if _, err := f.js.Publish(t.Context(), "$O.o_outputs.M."+base64.URLEncoding.EncodeToString([]byte(name)), meta); err != nil {
			t.Fatal(err)
		}
		return name
	}
	const over = offload.DefaultMaxOutput + 1
	for _, tc := range []struct{ key, name, want string }{
		{"s1.r1.c1", forge("s1.r1.c1", "N1", over, over/offload.ChunkSize+1), "ceiling"},
		{"s1.r2.c1", forge("s1.r2.c1", "N2", 3000, 3000), "chunks"},
		{"s1.r3.c1", forge("s1.r3.c1", ">", over, over/offload.ChunkSize+1), "ceiling"},
	} {
		ref := bus.Block{Type: bus.BlockData, MediaType: "text/plain", URL: "nats-object://o_outputs/" + tc.name}
		if _, err := f.st.Seal(t.Context(), tc.key, []bus.Block{ref}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: seal: %v, want a refusal naming the %s", tc.key, err, tc.want)
		}
		if _, err := f.obs.GetInfo(t.Context(), tc.name); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatalf("%s: the refused object is kept: %v", tc.key, err)
		}
	}
	// Left: the victim's chunks and metadata, and nothing of the forged ones'.
	si, err := st.Info(t.Context(), jetstream.WithSubjectFilter("$O.o_outputs.>"))
	if err != nil {
		t.Fatal(err)
	}
	if len(si.State.Subjects) != 2 || si.State.Subjects["$O.o_outputs.C."+vinfo.NUID] == 0 {
		t.Fatalf("left in the store: %v", si.State.Subjects)
	}
	if _, err := f.st.Seal(t.Context(), "s2.r1.c1", []bus.Block{victim}); err != nil {
		t.Fatalf("the other session's object: %v", err)
	}
	// The ceiling is the router's (router --max-output): below the
	// object's 3,000 bytes it refuses what the default took.
	f.st.Ceiling = 2000
	if _, err := f.st.Seal(t.Context(), "s2.r1.c1", []bus.Block{victim}); err == nil || !strings.Contains(err.Error(), "2000-byte output ceiling") {
		t.Fatalf("past a lowered ceiling: %v", err)
	}
}
