package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// RefAbove is the encoded size above which a recorded result is kept in
// P_outputs and its entry holds a reference (Entry.ResultRef, 1.24).
const RefAbove = 16 << 10

// byRef stores res, the result of call key, in P_outputs as one JSON
// object and returns its reference (with its digest, 5.9); "" keeps it
// inline (small, no bucket, or the bucket refused it or took longer than
// recordWait: the entry is then as before 1.24).
func byRef(ctx context.Context, l *Ledger, key string, res *bus.Result) string {
	if l.cfg.Outputs == nil || res.Size() <= RefAbove {
		return ""
	}
	b, err := json.Marshal(res)
	if err != nil {
		return ""
	}
	ref := make(chan string, 1)
	l.writes.Go(func() { // a put's own bound is minutes (offload.PutTimeout)
		out, err := l.cfg.Outputs.Fit(ctx, key, []bus.Block{{Type: bus.BlockText, Text: string(b)}}, 0, false)
		if err != nil || len(out) != 2 {
			l.cfg.Logger.Warn("ledger: result kept inline: not stored in the outputs bucket", "key", key, "err", err)
			ref <- ""
			return
		}
		ref <- out[1].URL
	})
	wait := time.NewTimer(recordWait)
	defer wait.Stop()
	select {
	case r := <-ref:
		return r
	case <-wait.C:
		return ""
	}
}

// result is e's recorded result (e.recorded()), read back from P_outputs
// when kept by reference: the object of the digest recorded, or an error
// (gone, written again, unreadable).
func result(ctx context.Context, l *Ledger, e *Entry) (bus.Result, error) {
	var res bus.Result
	if e.ResultRef == "" {
		return *e.Result, nil
	}
	if l.cfg.Stored == nil {
		return res, fmt.Errorf("no outputs bucket to read %s from", e.ResultRef)
	}
	obj, err := l.cfg.Stored.Open(ctx, e.ResultRef)
	if err != nil {
		return res, err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj) // the digest checked at the end
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	return res, err
}

// resultOf is result, or for call c an unknown_outcome that says why its
// recorded result cannot be given (never another result).
func resultOf(ctx context.Context, l *Ledger, e *Entry, c bus.Call) bus.Result {
	res, err := result(ctx, l, e)
	if err != nil {
		l.cfg.Logger.Warn("ledger: a recorded result kept by reference cannot be read", "ref", e.ResultRef, "err", err)
		return bus.ErrorResult(c, bus.CodeUnknownOutcome, fmt.Sprintf(
			"UnknownOutcomeError: The earlier run of tool '%s' for this call finished, but its recorded result is no longer kept (%v); it may or may not have taken effect.", c.Name, err))
	}
	return res
}
