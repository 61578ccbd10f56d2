package skills

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/store"
)

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMaterializer(t *testing.T) {
	s := testkit.RunServer(t)
	js := testkit.JetStream(t, testkit.Connect(t, s))
	obj, err := store.SkillsStore(t.Context(), js, bus.NewSubjects(""), 1)
	if err != nil {
		t.Fatal(err)
	}
	cat := NewCatalogue(Config{Objects: obj})
	if err := cat.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, cat.Drain)
	src := filepath.Join(t.TempDir(), "tool")
	writeFile(t, filepath.Join(src, "SKILL.md"), "---\nname: tool\ndescription: v1\n---\nRun scripts/run.sh.\n")
	writeFile(t, filepath.Join(src, "scripts", "run.sh"), "echo v1\n")
	if _, err := Push(t.Context(), obj, src, ""); err != nil {
		t.Fatal(err)
	}
	digestOf := func() string {
		for _, x := range cat.Skills("") {
			return x.Digest
		}
		return ""
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if digestOf() == "" {
			return fmt.Errorf("skill not seen")
		}
		return nil
	})
	v1 := digestOf()
	m, err := NewMaterializer(cat, filepath.Join(t.TempDir(), "mat"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Acquire(t.Context(), "nope", ""); err == nil {
		t.Fatal("unknown skill acquired")
	}

	// Concurrent first uses share one materialization.
	const n = 8
	dirs := make([]string, n)
	releases := make([]func(), n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, rel, err := m.Acquire(t.Context(), "tool", "")
			if err != nil {
				t.Error(err)
				return
			}
			dirs[i], releases[i] = d, rel
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, d := range dirs {
		if d != dirs[0] {
			t.Fatalf("dirs differ: %v", dirs)
		}
	}
	if m.writes != 1 {
		t.Fatalf("%d materializations for concurrent first uses", m.writes)
	}
	if b, err := os.ReadFile(filepath.Join(dirs[0], "scripts", "run.sh")); err != nil || string(b) != "echo v1\n" {
		t.Fatalf("script %q %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dirs[0], "scripts", "run.sh")); fi.Mode().Perm()&0o100 == 0 {
		t.Fatal("script is not executable")
	}
	for _, r := range releases[1:] {
		r()
	}
	old, holdOld := dirs[0], releases[0] // a script still running on v1

	// A new version goes to a new directory; v1's stays while it is held.
	writeFile(t, filepath.Join(src, "scripts", "run.sh"), "echo v2\n")
	if _, err := Push(t.Context(), obj, src, ""); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if digestOf() == v1 {
			return fmt.Errorf("v2 not seen")
		}
		return nil
	})
	d2, rel2, err := m.Acquire(t.Context(), "tool", "")
	if err != nil {
		t.Fatal(err)
	}
	if d2 == old {
		t.Fatal("v2 went to v1's directory")
	}
	rel2()
	if b, err := os.ReadFile(filepath.Join(old, "scripts", "run.sh")); err != nil || string(b) != "echo v1\n" {
		t.Fatalf("v1's files while held: %q %v", b, err)
	}
	holdOld()
	holdOld() // releasing twice is harmless
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("v1's directory not removed once unused: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d2, "scripts", "run.sh")); err != nil || string(b) != "echo v2\n" {
		t.Fatalf("v2 (current) removed or wrong: %q %v", b, err)
	}
}
