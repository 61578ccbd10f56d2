package skills

import (
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
