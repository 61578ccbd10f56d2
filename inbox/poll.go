package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/life"
)

// startPolling loads the waiting calls as the approver may read them, then
// keeps polling until Stop: P.admin.parked.list every PollInterval, and a
// direct get of the record of each call that is new or changed (for its
// revision and user, which the list does not carry).
func (s *Server) startPolling(ctx context.Context) error {
	if err := s.pollOnce(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		life.Every(ctx, s.cfg.PollInterval, func(time.Time) {
			if err := s.pollOnce(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("inbox: parked.list", "err", err)
			}
		})
	}()
	s.mu.Lock()
	s.stop = func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("inbox: polling stop: %w", ctx.Err())
		}
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) pollOnce(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var list struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	if err := s.cl.Admin(lctx, "parked.list", "", nil, &list); err != nil {
		return err
	}
	seen := make(map[string]bool, len(list.Parked))
	for _, p := range list.Parked {
		key := bus.CallKey(p.Session, p.ReplyID, p.ID)
		seen[key] = true
		if it, ok := s.lookup(key); ok && it.Kind == p.Kind && it.InputDigest == p.InputDigest && it.Expires.Equal(p.Expires) {
			continue
		}
		s.refresh(lctx, key)
	}
	for _, key := range s.absent(seen) {
		s.drop(key)
	}
	return nil
}
