package skills

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/life"
)

// Config configures a Catalogue.
type Config struct {
	// Dirs are local skill sources, lowest priority first; each is one
	// skill folder or a folder of skill folders. They are read at Start.
	Dirs []string
	// Objects is the P_skills object store, watched after Start; its skills
	// win over local ones. Nil means local skills only.
	Objects jetstream.ObjectStore
	// Logger receives the errors of skills that are not served; nil discards.
	Logger *slog.Logger
}

// Catalogue holds every skill a router serves, from its folders and the
// object store, kept current. It is safe for concurrent use.
type Catalogue struct {
	cfg Config
	log *slog.Logger

	mu      sync.RWMutex
	local   map[string]*Skill      // skill name → the local skill that wins
	objects map[string]objectSkill // object name → its skill
	errs    map[string]error       // source (folder or object) → why it is not served

	started bool
	life    *life.Life // the watch runs as its loop
	ready   chan struct{}
}

type objectSkill struct {
	objDigest string // the object store's digest of the packed object
	skill     *Skill
}

// NewCatalogue returns a Catalogue; call Start before use.
func NewCatalogue(cfg Config) *Catalogue {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Catalogue{cfg: cfg, log: cfg.Logger, local: map[string]*Skill{}, objects: map[string]objectSkill{},
		errs: map[string]error{}, ready: make(chan struct{}), life: life.New(life.Config{Logger: cfg.Logger})}
}

// Start reads the folders and watches the object store, returning once its
// skills are loaded. A bad skill is logged and left out (Errors); an
// unreadable folder is an error.
func (c *Catalogue) Start(ctx context.Context) error {
	c.started = true
	for _, dir := range c.cfg.Dirs {
		found, errs, err := LoadDir(dir)
		if err != nil {
			return err
		}
		c.mu.Lock()
		for _, s := range found {
			c.local[s.Name] = s // a later folder wins
		}
		for _, err := range errs {
			src := dir // the folder, unless the error names the file
			if se, ok := err.(*Error); ok {
				src = se.File
			}
			c.errs[src] = err
			c.log.Warn("skill not served", "err", err)
		}
		c.mu.Unlock()
	}
	if c.cfg.Objects == nil {
		close(c.ready)
		return nil
	}
	w, err := c.cfg.Objects.Watch(ctx)
	if err != nil {
		return fmt.Errorf("skills: watch the object store: %w", err)
	}
	c.life.Defer(func(context.Context) error {
		// Start's context ending stops the watch first (nats.go unsubscribes it then).
		if err := w.Stop(); !errors.Is(err, nats.ErrBadSubscription) {
			return err
		}
		return nil
	})
	c.life.Loop(func(lctx context.Context) {
		rctx, cancel := context.WithCancel(ctx) // Start's context, or the drain
		defer context.AfterFunc(lctx, cancel)()
		defer cancel()
		c.run(rctx, w)
	})
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		_ = c.Drain(context.WithoutCancel(ctx))
		return ctx.Err()
	}
}

// run applies the object store's updates until the watch ends.
func (c *Catalogue) run(ctx context.Context, w jetstream.ObjectWatcher) {
	ready := sync.OnceFunc(func() { close(c.ready) }) // at the end of the initial values
	for {
		select {
		case <-ctx.Done():
			return
		case info, ok := <-w.Updates():
			if !ok {
				return
			}
			if info == nil {
				ready()
				continue
			}
			c.apply(ctx, info)
		}
	}
}

// apply takes one object store update: a removal forgets the skill; a skill
// whose object (or whose content) is already held is not read again.
func (c *Catalogue) apply(ctx context.Context, info *jetstream.ObjectInfo) {
	if info.Deleted {
		c.mu.Lock()
		delete(c.objects, info.Name)
		delete(c.errs, info.Name)
		c.mu.Unlock()
		return
	}
	c.mu.RLock()
	cur, have := c.objects[info.Name]
	reuse := c.byDigest(info.Metadata[metaDigest])
	c.mu.RUnlock()
	if have && cur.objDigest == info.Digest {
		return
	}
	var s *Skill
	if name, user, ok := parseObjectName(info.Name); ok && reuse != nil && reuse.Name == name {
		s = reuse.withScope("bus:"+info.Bucket+"/"+info.Name, user)
	} else {
		var err error
		if s, err = fetch(ctx, c.cfg.Objects, info); err != nil {
			c.log.Warn("skill not served", "object", info.Name, "err", err)
			c.mu.Lock()
			delete(c.objects, info.Name)
			c.errs[info.Name] = err
			c.mu.Unlock()
			return
		}
	}
	c.mu.Lock()
	c.objects[info.Name] = objectSkill{objDigest: info.Digest, skill: s}
	delete(c.errs, info.Name)
	c.mu.Unlock()
}

// byDigest returns a held skill with that content digest; c.mu held.
func (c *Catalogue) byDigest(d string) *Skill {
	if d == "" {
		return nil
	}
	for _, o := range c.objects {
		if o.skill.Digest == d {
			return o.skill
		}
	}
	for _, s := range c.local {
		if s.Digest == d {
			return s
		}
	}
	return nil
}

// Drain ends the watch, waiting for it until ctx ends, then at most a
// short cleanup (internal/life). It is safe to call twice and concurrently.
func (c *Catalogue) Drain(ctx context.Context) error {
	if !c.started {
		return nil
	}
	return c.life.Drain(ctx)
}

// Closed is closed once Drain has returned.
func (c *Catalogue) Closed() <-chan struct{} { return c.life.Closed() }

// Skills returns user's skills by name before group visibility; later
// sources win: folders, shared skills, then user-scoped ones.
func (c *Catalogue) Skills(user string) []*Skill {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := maps.Clone(c.local)
	for _, o := range c.objects {
		if o.skill.User == "" {
			out[o.skill.Name] = o.skill
		}
	}
	if user != "" {
		for _, o := range c.objects {
			if o.skill.User == user {
				out[o.skill.Name] = o.skill
			}
		}
	}
	return sortByName(slices.Collect(maps.Values(out)))
}

// All returns every skill that some user sees: the skills of Skills("")
// and every user-scoped skill, sorted by name, then user.
func (c *Catalogue) All() []*Skill {
	out := c.Skills("")
	c.mu.RLock()
	for _, o := range c.objects {
		if o.skill.User != "" {
			out = append(out, o.skill)
		}
	}
	c.mu.RUnlock()
	return sortByName(out)
}

func sortByName(s []*Skill) []*Skill {
	slices.SortFunc(s, func(a, b *Skill) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.User, b.User)) })
	return s
}

// Errors returns why each skill that is not served was refused, by source.
func (c *Catalogue) Errors() map[string]error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return maps.Clone(c.errs)
}
