package skills

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestAttackFrontMatterAliases (session 28, second red team): a SKILL.md
// (a third-party skill folder, a pushed object) whose front matter repeats
// 30 KB of text through YAML aliases, a list of 100 aliases of a list of
// 100 aliases: decoding it cost every router 6 s and 2.6-3.2 GB at each
// load. It is refused before decoding (as is 1.2 MB of expanded text, and
// an anchor holding an alias of itself); a modest alias still reads.
func TestAttackFrontMatterAliases(t *testing.T) {
	aliases := func(name string, n int) string {
		return "[" + strings.TrimSuffix(strings.Repeat("*"+name+",", n), ",") + "]"
	}
	skill := func(front string) []byte {
		return []byte("---\nname: x\ndescription: d\n" + front + "---\nbody\n")
	}
	for name, front := range map[string]string{
		"bomb":     "big: &s " + strings.Repeat("a", 30000) + "\nl1: &l1 " + aliases("s", 100) + "\nl2: " + aliases("l1", 100) + "\n",
		"wide":     "big: &s " + strings.Repeat("a", 30000) + "\nl1: " + aliases("s", 40) + "\n",
		"itself":   "l: &l [a, *l]\n",
		"in a map": "m: &m {k: *m}\n",
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := Parse("x/SKILL.md", "x", skill(front))
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "YAML") && !strings.Contains(err.Error(), "aliases") {
			t.Errorf("%s: %v", name, err)
		}
		if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 32 {
			t.Errorf("%s: %d MB allocated", name, mb)
		}
	}
	m, _, err := Parse("x/SKILL.md", "x", skill("metadata: {a: &v shared, b: *v}\ntags: &t [one, two]\nalso: *t\n"))
	if err != nil || m.Metadata["b"] != "shared" || m.Metadata["also"] != `["one","two"]` {
		t.Fatalf("a modest alias: %+v %v", m.Metadata, err)
	}
}

// TestAttackUnpackLongNames (session 28, second red team): a skill object
// whose tar entries carry path names of nearly 1 MiB each (PAX headers, a
// thousand to one under gzip): 256 of them in a 287 KB object cost Unpack
// 1.4 s, 800 MB allocated and 268 MB held, 4096 sixteen times that, on
// every router at every load; no such path can be materialised anyway. A
// path past 4096 bytes, or a name in it past 255, is refused at its entry.
func TestAttackUnpackLongNames(t *testing.T) {
	pack := func(names ...string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for _, name := range names {
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 1, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	long := strings.Repeat("a", 1<<20-4096)
	var names []string
	for i := range 16 {
		names = append(names, fmt.Sprintf("%04d%s", i, long))
	}
	object := pack(names...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Unpack(object)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "longer than 4096 bytes") {
		t.Fatalf("1 MiB names: %v", err)
	}
	if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 64 {
		t.Errorf("1 MiB names: %d MB allocated before the refusal", mb)
	}
	component := strings.Repeat("b", 256)
	if _, err := Unpack(pack("SKILL.md", "refs/"+component)); err == nil || !strings.Contains(err.Error(), "name longer than 255") {
		t.Fatalf("a 256-byte name: %v", err)
	}
	deep := strings.Repeat(strings.Repeat("c", 255)+"/", 15) + "f.md" // 3,844 bytes
	if files, err := Unpack(pack("SKILL.md", deep)); err != nil || len(files) != 2 {
		t.Fatalf("a long path within the bounds: %v", err)
	}
}
