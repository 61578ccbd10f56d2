package groups_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/groups"
	"github.com/toolbus/toolbus/schemas"
)

// TestRequestSubschemasTogether: a request's external tools count their
// subschemas together (docs/protocol.md 4.3); each alone would pass.
func TestRequestSubschemasTogether(t *testing.T) {
	wide := func(n int, tag string) json.RawMessage {
		var b strings.Builder
		fmt.Fprintf(&b, `{"type":"object","description":%q,"properties":{`, tag)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{}`, i)
		}
		b.WriteString(`}}`)
		return json.RawMessage(b.String())
	}
	tools := []bus.ExternalTool{
		{Name: "a", Description: "x", InputSchema: wide(600, "a")},
		{Name: "b", Description: "x", InputSchema: wide(600, "b")},
	}
	if _, err := groups.CheckRequest(&bus.Request{ExternalTools: tools[:1]}); err != nil {
		t.Fatalf("one tool: %v", err)
	}
	_, err := groups.CheckRequest(&bus.Request{ExternalTools: tools})
	want := fmt.Sprintf("external tool b: the request's external tools have more than %d subschemas together", schemas.MaxSubschemas)
	var be *bus.Error
	if !asError(err, &be) || be.Code != bus.CodeBadRequest || be.Message != want {
		t.Fatalf("two tools: %v, want bad_request %q", err, want)
	}
	_, err = groups.CheckRequest(&bus.Request{ExternalTools: []bus.ExternalTool{{Name: "deep", InputSchema: json.RawMessage(`{"type":"object","items":` + strings.Repeat(`{"items":`, 100) + `{}` + strings.Repeat(`}`, 101))}}})
	if !asError(err, &be) || be.Code != bus.CodeBadRequest || !strings.Contains(be.Message, "external tool deep: schemas: schema nests deeper than 64 levels") {
		t.Fatalf("deep: %v", err)
	}
}

func asError(err error, be **bus.Error) bool {
	e, ok := err.(*bus.Error)
	*be = e
	return ok
}
