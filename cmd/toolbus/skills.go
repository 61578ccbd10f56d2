package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/skills"
)

func runSkills(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("skills", stderr)
	user := fs.String("user", "", "push or remove the skill scoped to this user (visible only to that user's batches and queries)")
	asJSON := fs.Bool("json", false, "ls and show: print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError(fs, "skills wants ls, show <name>, push DIR or rm <name>")
	}
	verb, rest := pos[0], pos[1:]
	want := map[string]int{"ls": 0, "show": 1, "push": 1, "rm": 1}
	n, ok := want[verb]
	if !ok {
		return usageError(fs, "unknown skills command %q: want ls, show, push or rm", verb)
	}
	if len(rest) != n {
		return usageError(fs, "skills %s takes %d argument(s), got %d", verb, n, len(rest))
	}
	switch verb {
	case "push":
		// Check before connecting: a broken skill never reaches the bus.
		s, err := skills.LoadFolder(rest[0])
		if err == nil {
			var os jetstream.ObjectStore
			if os, err = cn.objects(ctx); err != nil {
				return err
			}
			s, err = skills.Push(ctx, os, rest[0], *user)
		}
		if err != nil {
			return fmt.Errorf("not pushed: %w", err)
		}
		fmt.Fprintf(stdout, "pushed skill %s (%s) for %s: %s\n", s.Name, s.Digest, scopeName(*user), s.Source)
		return nil
	case "rm":
		os, err := cn.objects(ctx)
		if err != nil {
			return err
		}
		if err := skills.Remove(ctx, os, rest[0], *user); err != nil {
			if errors.Is(err, skills.ErrNotFound) {
				return fmt.Errorf("no skill %s in the object store for %s", rest[0], scopeName(*user))
			}
			return err
		}
		fmt.Fprintf(stdout, "removed skill %s for %s\n", rest[0], scopeName(*user))
		return nil
	}
	cl, err := cn.dial(ctx)
	if err != nil {
		return err
	}
	var list struct {
		Skills []bus.SkillInfo `json:"skills"`
	}
	if err := cl.Admin(ctx, "skills.list", "", struct{}{}, &list); err != nil {
		return err
	}
	if verb == "ls" {
		if *asJSON {
			return writeJSON(stdout, list.Skills)
		}
		if len(list.Skills) == 0 {
			fmt.Fprintln(stdout, "no skills")
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, s := range list.Skills {
			fmt.Fprintln(tw, skillLine(s))
		}
		return tw.Flush()
	}
	// show
	var found *bus.SkillInfo
	for i, s := range list.Skills {
		if s.Name == rest[0] && (s.User == *user || found == nil && s.User == "") {
			found = &list.Skills[i]
		}
	}
	if found == nil {
		return fmt.Errorf("no skill %s", rest[0])
	}
	if *asJSON {
		return writeJSON(stdout, found)
	}
	fmt.Fprintf(stdout, "%s\n  description: %s\n  source: %s\n  digest: %s\n", found.Name, found.Description, found.Source, found.Digest)
	if found.User != "" {
		fmt.Fprintf(stdout, "  user: %s\n", found.User)
	}
	if len(found.Groups) > 0 {
		fmt.Fprintf(stdout, "  groups: %s\n", strings.Join(found.Groups, ", "))
	}
	return nil
}

func scopeName(user string) string {
	if user == "" {
		return "every user"
	}
	return "user " + user
}

// skillLine is one line of skills ls, its columns tab-separated (name
// with its user and groups, description, source, digest).
func skillLine(s bus.SkillInfo) string {
	var b strings.Builder
	b.WriteString(s.Name)
	if s.User != "" {
		b.WriteString(" [user " + s.User + "]")
	}
	if len(s.Groups) > 0 {
		b.WriteString(" [groups " + strings.Join(s.Groups, ", ") + "]")
	}
	digest := strings.TrimPrefix(s.Digest, "sha256:")
	if len(digest) > 12 {
		digest = digest[:12]
	}
	fmt.Fprintf(&b, "\t%s\t%s\t(%s)", s.Description, s.Source, digest)
	return b.String()
}

// objects connects and opens the deployment's skills object store (the
// routers create it).
func (cn *conn) objects(ctx context.Context) (jetstream.ObjectStore, error) {
	nc, err := cn.connect(ctx)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	bucket := bus.NewSubjects(cn.prefix).ObjectStore(bus.ObjectSkills)
	os, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("skills object store %s (is a router running with prefix %q?): %w", bucket, cn.prefix, err)
	}
	return os, nil
}
