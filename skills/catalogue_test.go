package skills_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/skills"
	"github.com/toolbus/toolbus/store"
)

const bound = 10 * time.Second

func objectStore(t *testing.T) (jetstream.ObjectStore, func() jetstream.ObjectStore) {
	t.Helper()
	s := testkit.RunServer(t)
	open := func() jetstream.ObjectStore {
		js := testkit.JetStream(t, testkit.Connect(t, s))
		os, err := store.SkillsStore(t.Context(), js, bus.NewSubjects(""), 1)
		if err != nil {
			t.Fatal(err)
		}
		return os
	}
	return open(), open
}

func startCatalogue(t *testing.T, cfg skills.Config) *skills.Catalogue {
	t.Helper()
	c := skills.NewCatalogue(cfg)
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Stop(t, c.Drain)
	return c
}

// describe returns who wins for name as seen by user: its description.
func describe(c *skills.Catalogue, user, name string) string {
	for _, s := range c.Skills(user) {
		if s.Name == name {
			return s.Description
		}
	}
	return ""
}

func waitDescribe(t *testing.T, c *skills.Catalogue, user, name, want string) {
	t.Helper()
	testkit.CheckFor(t, bound, 5*time.Millisecond, func() error {
		if got := describe(c, user, name); got != want {
			return fmt.Errorf("user %q sees %s as %q, want %q", user, name, got, want)
		}
		return nil
	})
}

func TestCatalogueSources(t *testing.T) {
	root := t.TempDir()
	mk := func(dir, name, desc string) string {
		p := filepath.Join(root, dir, name)
		write(t, filepath.Join(p, "SKILL.md"), string(skillMD(name, desc)))
		return p
	}
	mk("a", "pdf", "from a")
	mk("a", "only-a", "only in a")
	mk("b", "pdf", "from b")
	write(t, filepath.Join(root, "b", "broken", "SKILL.md"), "no front matter")
	pushed := mk("push", "pdf", "from the bus")
	alices := mk("alice", "pdf", "alice's own")

	os, open := objectStore(t)
	c := startCatalogue(t, skills.Config{Dirs: []string{filepath.Join(root, "a"), filepath.Join(root, "b")}, Objects: os})
	if got := describe(c, "", "pdf"); got != "from b" {
		t.Fatalf("later folder must win, got %q", got)
	}
	if got := describe(c, "", "only-a"); got != "only in a" {
		t.Fatalf("only-a: %q", got)
	}
	if errs := c.Errors(); len(errs) != 1 {
		t.Fatalf("errors %v", errs)
	}
	// A second router's catalogue, on its own connection.
	other := startCatalogue(t, skills.Config{Objects: open()})

	ctx := t.Context()
	if _, err := skills.Push(ctx, os, pushed, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := skills.Push(ctx, os, alices, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, cat := range []*skills.Catalogue{c, other} {
		waitDescribe(t, cat, "", "pdf", "from the bus")
		waitDescribe(t, cat, "bob", "pdf", "from the bus")
		waitDescribe(t, cat, "alice", "pdf", "alice's own")
	}
	if n := len(other.All()); n != 2 {
		t.Fatalf("All lists %d skills, want the shared and alice's pdf", n)
	}
	// An unchanged push is not read again.
	before := other.Skills("alice")[0]
	if _, err := skills.Push(ctx, os, alices, "alice"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(pushed, "SKILL.md"), string(skillMD("pdf", "from the bus, v2")))
	if _, err := skills.Push(ctx, os, pushed, ""); err != nil {
		t.Fatal(err)
	}
	waitDescribe(t, other, "", "pdf", "from the bus, v2")
	if other.Skills("alice")[0] != before {
		t.Fatal("an unchanged skill was read again")
	}
	// Removals: alice falls back to the shared skill, everyone to folder b.
	if err := skills.Remove(ctx, os, "pdf", "alice"); err != nil {
		t.Fatal(err)
	}
	waitDescribe(t, other, "alice", "pdf", "from the bus, v2")
	if err := skills.Remove(ctx, os, "pdf", ""); err != nil {
		t.Fatal(err)
	}
	waitDescribe(t, c, "alice", "pdf", "from b")
	waitDescribe(t, other, "", "pdf", "")
	if err := skills.Remove(ctx, os, "pdf", ""); !errors.Is(err, skills.ErrNotFound) {
		t.Fatalf("second removal: %v", err)
	}
}

func TestPushRefusesInvalid(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "pdf", "SKILL.md"), "---\nname: pdf\n---\nBody")
	os, _ := objectStore(t)
	_, err := skills.Push(t.Context(), os, filepath.Join(root, "pdf"), "")
	var se *skills.Error
	if !errors.As(err, &se) {
		t.Fatalf("push: %v", err)
	}
	if _, err := os.GetInfo(t.Context(), "pdf"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("an invalid skill was stored: %v", err)
	}
}

// A router's drain ends Start's context before its unwind stops the
// watch: the stop then finds the watch stopped, which is not an error.
func TestDrainAfterStartContextEnds(t *testing.T) {
	objects, _ := objectStore(t)
	var logs testkit.Buffer
	c := skills.NewCatalogue(skills.Config{Objects: objects, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(t.Context())
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "unwind step") {
		t.Fatalf("drain warned: %s", logs.String())
	}
}
