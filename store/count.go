package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// The catalogue's bounds' defaults (Config.MaxTools, MaxGroups; protocol 7.1, 1.25).
const (
	DefaultMaxTools  = 4096
	DefaultMaxGroups = 1024
)

// Count is the bound routers keep on the names of a bucket whose every key
// each of them caches (P_tools, P_groups; protocol 7.1, 1.25): a new name
// is admitted while the names cached plus those admitted and not yet
// cached are fewer than the bound; a name held is never judged. Routers
// judge apart, so together they may admit more, which the stream's
// max_msgs (HardMsgs) stops. A nil Count admits everything.
type Count struct {
	what, flag string // what is bounded ("tools") and the router flag that sets it
	bound      int

	js     jetstream.JetStream // where the bucket's stream is (capMsgs), for Marked
	stream string

	mu      sync.Mutex
	pending int    // admitted, not yet cached (Done)
	refused uint64 // new names refused since the start
}

// newCount bounds the names of what at n, set by --flag (nil: n < 0, none).
func newCount(what, flag string, n int) *Count {
	if n < 0 {
		return nil
	}
	return &Count{what: what, flag: flag, bound: n}
}

// CountOf is the bound Setup gave kv's names (nil: none).
func CountOf(kv jetstream.KeyValue) *Count {
	if k, ok := kv.(*KV); ok {
		return k.count
	}
	return nil
}

// Take admits one new name beside the held ones the caller caches, or
// returns the refusal's text; Done ends what it admitted.
func (c *Count) Take(held int) (string, bool) { return c.take(held, true) }

// Judge is Take admitting nothing: whether a new name has room now, or the
// refusal's text (counted, as Take's).
func (c *Count) Judge(held int) (string, bool) { return c.take(held, false) }

func (c *Count) take(held int, admit bool) (string, bool) {
	if c == nil {
		return "", true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if held+c.pending < c.bound {
		if admit {
			c.pending++
		}
		return "", true
	}
	return c.refuse(fmt.Sprintf("the catalogue holds %d %s, the routers' bound", held+c.pending, c.what)), false
}

// Full counts a new name the stream refused at its max_msgs (IsMaxMsgs)
// and returns the refusal's text.
func (c *Count) Full() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refuse("the stored catalogue of " + c.what + " is at its stream's max_msgs, the routers' bound and its margin, delete markers counted,")
}

// refuse counts a refusal and returns its text; c.mu is held.
func (c *Count) refuse(why string) string {
	c.refused++
	return fmt.Sprintf("limit_exceeded: %s (router --%s): a new name is refused, one it holds is still taken; nothing was written (docs/protocol.md 7.1)", why, c.flag)
}

// Done ends a Take that admitted: the name is cached, or was not written.
func (c *Count) Done() {
	if c != nil {
		c.mu.Lock()
		c.pending--
		c.mu.Unlock()
	}
}

// Bound is the bound (0: none) and the new names refused since the start.
func (c *Count) Bound() (int, uint64) {
	if c == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bound, c.refused
}

// IsMaxMsgs reports whether err is a stream's refusal of a new message at
// its max_msgs (discard new), which no retry changes.
func IsMaxMsgs(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == codeStoreFailed && strings.Contains(apiErr.Description, "maximum messages")
}

// HardMsgs is the max_msgs of a bucket whose names are bounded at n: n
// plus a quarter, at least 64, for what routers admit apart, the delete
// markers of names taken out, and the writes of held names, which a
// replicated stream's discard-new check counts whole; plus BuiltinRoom.
func HardMsgs(n int) int64 { return int64(n + max(n/4, 64) + BuiltinRoom) }

// BuiltinRoom is the room in max_msgs of the routers' built-in tools, which
// the bound on new names does not judge (registry.Builtins).
const BuiltinRoom = 32

// capMsgs sets the max_msgs of kv's stream to HardMsgs(bound) plus the
// delete markers it holds (what it holds less its keys: a marker counts
// until its name is written again), or what it holds plus the margin when
// more (a catalogue of a router before 1.25, a bound made smaller:
// HardBytesFor).
func (c *Count) capMsgs(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) error {
	c.js, c.stream = js, "KV_"+kv.Bucket()
	return Retry(ctx, Provision, func(ctx context.Context) error {
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return err
		}
		held := 0
		for range keys.Keys() {
			held++
		}
		s, err := js.Stream(ctx, c.stream)
		if err != nil {
			return err
		}
		cfg, msgs := s.CachedInfo().Config, int64(s.CachedInfo().State.Msgs)
		cfg.MaxMsgs = max(HardMsgs(c.bound)+max(msgs-int64(held), 0), msgs+HardMsgs(c.bound)-int64(c.bound))
		_, err = js.UpdateStream(ctx, cfg)
		return err
	})
}

// Marked makes room in the stream's max_msgs for the delete marker a
// delete of a name just left (tools.delete, groups.delete), so names the
// operator deletes are free for new ones (docs/security.md).
func (c *Count) Marked(ctx context.Context) error {
	if c == nil || c.js == nil {
		return nil
	}
	return Retry(ctx, Provision, func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, c.stream)
		if err != nil {
			return err
		}
		cfg := s.CachedInfo().Config
		cfg.MaxMsgs++
		_, err = c.js.UpdateStream(ctx, cfg)
		return err
	})
}
