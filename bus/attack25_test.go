package bus_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestAttackRepeatedHeaderLine (session 25, red team): one header line
// given twice under the same name (nats.go keeps both values, in order) is
// an attribute given twice, as protocol section 1 says: with different
// values bad_event, in Decode and DecodeHead alike; before, the first value
// was taken and the second ignored, so a result could name two calls.
func TestAttackRepeatedHeaderLine(t *testing.T) {
	for _, k := range []string{"ce-toolcallid", "ce-sessionid", "ce-replyid", "ce-id", "content-type"} {
		for _, second := range []string{"same", "%-encoded", "other"} {
			m := bus.CompactMsg("x", execEvent(t))
			if k == "content-type" {
				m = bus.BinaryMsg("x", execEvent(t))
			}
			first := m.Header.Get(k)
			v := map[string]string{"same": first, "%-encoded": fmt.Sprintf("%%%02X%s", first[0], first[1:]), "other": "other"}[second]
			m.Header[k] = append(m.Header[k], v)
			_, err := bus.Decode(m)
			var e bus.Event
			errHead := bus.DecodeHead(m, &e)
			// content-type is not percent-decoded: its encoded value is another
			refused := second == "other" || second == "%-encoded" && k == "content-type"
			if refused != (err != nil) || refused != (errHead != nil) {
				t.Fatalf("%s: %q then %q: Decode %v, DecodeHead %v", k, first, v, err, errHead)
			}
			if refused && (!errors.Is(err, bus.ErrBadEvent) || !errors.Is(errHead, bus.ErrBadEvent)) {
				t.Fatalf("%s: not bad_event: %v, %v", k, err, errHead)
			}
		}
	}
}
