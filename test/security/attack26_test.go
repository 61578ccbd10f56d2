package security

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestSharedAgentCannotStarveBoundReplays (held-out attack, issue 26):
// the shared agent may replay in any session without its own user, and a
// session id is its to choose, so 8 replay consumers in each of 128 made-up
// sessions filled the events stream's 1,024: every session with its own
// agent user then got limit_exceeded for its replay. Unbound sessions now
// stop at 3/4 of the bound, so a bound session still gets its replay.
func TestSharedAgentCannotStarveBoundReplays(t *testing.T) {
	d := newDeployment(t)
	all := d.conn("agent")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		made    int
		limited int
	)
	sem := make(chan struct{}, 16)
	for s := range 140 {
		for range 8 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				e, err := bus.NewEvent(bus.TypeReplay, "attacker", bus.Replay{})
				if err != nil {
					t.Error(err)
					return
				}
				msg, err := bus.SendRequest(testCtx(t), all.nc, fmt.Sprintf("toolbus.replay.x%d", s), e)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := bus.Decode(msg)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && got.Type == bus.TypeReplayReady:
					made++
				case err == nil && got.Type == bus.TypeError:
					limited++
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("the shared agent made %d replay consumers; %d refused", made, limited)
	rp, err := d.conn("session-s1").client().Replay(testCtx(t), "s1")
	var be *bus.Error
	if errors.As(err, &be) {
		t.Fatalf("a bound session's replay after the shared agent's flood: %v", err)
	}
	must(t, err)
	rp.Stop()
}
