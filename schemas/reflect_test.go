package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolbus/toolbus/schemas"
)

type address struct {
	Street string `json:"street" jsonschema:"description=Street and number"`
	Zip    string `json:"zip,omitempty"`
}

type weatherInput struct {
	City     string    `json:"city" jsonschema:"description=City name"`
	Days     int       `json:"days,omitempty" description:"Number of days"`
	Units    string    `json:"units,omitempty" jsonschema:"enum=metric,enum=imperial" jsonschema_description:"Unit system"`
	Tags     []string  `json:"tags"`
	Stops    []address `json:"stops,omitempty"`
	Home     address   `json:"home"`
	Work     *address  `json:"work,omitempty"`
	Note     string    `json:"note,omitempty" jsonschema:"required"`
	Secret   string    `json:"-"`
	internal string
}

func TestFor(t *testing.T) {
	raw, err := schemas.For[weatherInput]()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"street": map[string]any{"type": "string", "description": "Street and number"},
			"zip":    map[string]any{"type": "string"},
		},
		"required":             []any{"street"},
		"additionalProperties": false,
	}
	want := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"city":  map[string]any{"type": "string", "description": "City name"},
			"days":  map[string]any{"type": "integer", "description": "Number of days"},
			"units": map[string]any{"type": "string", "enum": []any{"metric", "imperial"}, "description": "Unit system"},
			"tags":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"stops": map[string]any{"type": "array", "items": addr},
			"home":  addr,
			"work":  addr,
			"note":  map[string]any{"type": "string"},
		},
		"required":             []any{"city", "tags", "home", "note"},
		"additionalProperties": false,
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("For[weatherInput]() mismatch (-want +got):\n%s\nraw: %s", diff, raw)
	}
	// Property order follows the struct, so models see fields as written.
	if i, j := strings.Index(string(raw), `"city"`), strings.Index(string(raw), `"note"`); i < 0 || j < i {
		t.Errorf("properties out of field order: %s", raw)
	}
	assertNoKeys(t, got, "title", "$ref", "$defs", "$schema", "$id", "definitions")
	if strings.Contains(string(raw), "Secret") || strings.Contains(string(raw), "internal") {
		t.Errorf("hidden field leaked: %s", raw)
	}
	if _, err := schemas.Compile(raw); err != nil {
		t.Errorf("Compile(For[weatherInput]()): %v", err)
	}
}

// jsonschema:"description=..." stops at the first unescaped comma; the
// description:"..." tag takes any text.
func TestForDescriptionComma(t *testing.T) {
	type in struct {
		A string `json:"a" jsonschema:"description=City name, e.g. Oslo"`
		B string `json:"b" jsonschema:"description=City name\\, e.g. Oslo"`
		C string `json:"c" description:"City name, e.g. Oslo"`
	}
	raw := string(schemas.MustFor[*in]())
	for _, want := range []string{
		`"a":{"type":"string","description":"City name"}`,
		`"b":{"type":"string","description":"City name, e.g. Oslo"}`,
		`"c":{"type":"string","description":"City name, e.g. Oslo"}`,
	} {
		if !strings.Contains(raw, want) {
			t.Errorf("For = %s, want it to contain %s", raw, want)
		}
	}
}

type titled struct {
	Title string `json:"title" jsonschema:"title=The title"`
	When  time.Time
}

func TestForStripsTitles(t *testing.T) {
	raw, err := schemas.For[titled]()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	// "title" the property stays; "title" the keyword goes.
	props := got["properties"].(map[string]any)
	if _, ok := props["title"]; !ok {
		t.Errorf("property title missing: %s", raw)
	}
	delete(props, "title")
	assertNoKeys(t, got, "title")
	if want := `{"type":"string","format":"date-time"}`; !strings.Contains(string(raw), `"When":`+want) {
		t.Errorf("time.Time not a date-time string: %s", raw)
	}
}

type node struct {
	Name     string `json:"name"`
	Children []node `json:"children"`
}

type list []list

type viaPointer struct {
	Next *viaPointer `json:"next,omitempty"`
}

type hiddenLoop struct {
	Name string      `json:"name"`
	Self *hiddenLoop `json:"-"`
}

func TestForErrors(t *testing.T) {
	tests := []struct {
		name string
		fn   func() (json.RawMessage, error)
		want string
	}{
		{"string", schemas.For[string], "schemas: For[string]: not a struct"},
		{"map", schemas.For[map[string]any], "not a struct"},
		{"pointer to pointer", schemas.For[**weatherInput], "not a struct"},
		{"recursive struct", schemas.For[node], "recursive type schemas_test.node cannot be inlined"},
		{"recursive via pointer", schemas.For[viaPointer], "recursive type"},
		{"recursive slice", schemas.For[struct{ L list }], "recursive type schemas_test.list"},
		{"chan field", schemas.For[struct{ C chan int }], "unsupported type chan int"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := tt.fn()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "schemas: ") {
				t.Errorf("err = %v (schema %s), want %q", err, raw, tt.want)
			}
		})
	}
	if _, err := schemas.For[hiddenLoop](); err != nil {
		t.Errorf("For[hiddenLoop]: %v; a json:\"-\" field must not count", err)
	}
}

func TestMustForPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustFor[int] did not panic")
		}
	}()
	schemas.MustFor[int]()
}

// assertNoKeys fails when any object in v has one of keys.
func assertNoKeys(t *testing.T, v any, keys ...string) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for _, k := range keys {
			if _, ok := x[k]; ok {
				t.Errorf("found key %q in %v", k, x)
			}
		}
		for _, e := range x {
			assertNoKeys(t, e, keys...)
		}
	case []any:
		for _, e := range x {
			assertNoKeys(t, e, keys...)
		}
	}
}
