package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/schemas"
	"github.com/toolbus/toolbus/worker"
)

type weatherIn struct {
	City  string `json:"city" jsonschema:"description=The city name"`
	Days  int    `json:"days,omitempty"`
	Units struct {
		Metric bool `json:"metric"`
	} `json:"units"`
}

func TestRegisterDerivesSchema(t *testing.T) {
	f := newFixture(t, true)
	given := json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		if err := worker.Register(w, bus.ToolDef{Name: "weather", Description: "Weather."},
			func(ctx context.Context, c *worker.Call, in weatherIn) (string, error) { return in.City, nil }); err != nil {
			t.Fatal(err)
		}
		if err := worker.Register(w, bus.ToolDef{Name: "given", Description: "Schema given.", InputSchema: given},
			func(ctx context.Context, c *worker.Call, in weatherIn) (string, error) { return "", nil }); err != nil {
			t.Fatal(err)
		}
	})
	regs := f.reg.registrations()
	i := slices.IndexFunc(regs, func(r bus.Register) bool { return len(r.Tools) == 1 && r.Tools[0].Name == "weather" })
	if i < 0 || regs[i].Worker != "w1" {
		t.Fatalf("registrations %s", jsonOf(regs))
	}
	derived := regs[i].Tools[0]
	var doc map[string]any
	if err := json.Unmarshal(derived.InputSchema, &doc); err != nil {
		t.Fatalf("schema %s: %v", derived.InputSchema, err)
	}
	if doc["type"] != "object" {
		t.Errorf("type %v, want object", doc["type"])
	}
	props, _ := doc["properties"].(map[string]any)
	for _, p := range []string{"city", "days", "units"} {
		if _, ok := props[p]; !ok {
			t.Errorf("property %s missing in %s", p, derived.InputSchema)
		}
	}
	if city, _ := props["city"].(map[string]any); city["type"] != "string" || city["description"] != "The city name" {
		t.Errorf("city property %v", city)
	}
	req, _ := doc["required"].([]any)
	if !slices.Equal(req, []any{"city", "units"}) {
		t.Errorf("required %v, want [city units]", req)
	}
	assertNoKeys(t, doc, "title", "$ref", "$defs", "definitions", "$schema", "$id")
	if _, err := schemas.Compile(derived.InputSchema); err != nil {
		t.Errorf("derived schema does not compile: %v", err)
	}
	j := slices.IndexFunc(regs, func(r bus.Register) bool { return len(r.Tools) == 1 && r.Tools[0].Name == "given" })
	if j < 0 || string(regs[j].Tools[0].InputSchema) != string(given) {
		t.Errorf("given schema replaced: %s", jsonOf(regs))
	}
}

// assertNoKeys fails when any object in v has one of keys.
func assertNoKeys(t *testing.T, v any, keys ...string) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			if slices.Contains(keys, k) {
				t.Errorf("schema has key %q", k)
			}
			assertNoKeys(t, sub, keys...)
		}
	case []any:
		for _, sub := range x {
			assertNoKeys(t, sub, keys...)
		}
	}
}

func TestRegisterRejectsUnderivableInput(t *testing.T) {
	w, err := worker.New(nil, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = worker.Register(w, bus.ToolDef{Name: "bad", Description: "x"},
		func(ctx context.Context, c *worker.Call, in string) (string, error) { return in, nil })
	if err == nil {
		t.Fatal("a non-struct input type was accepted")
	}
	if !strings.Contains(err.Error(), "bad") {
		t.Errorf("error %q does not name the tool", err)
	}
}

func TestRegisterDecodesInput(t *testing.T) {
	f := newFixture(t, true)
	var runs atomic.Int32
	got := make(chan weatherIn, 1)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		if err := worker.Register(w, bus.ToolDef{Name: "weather", Description: "Weather."},
			func(ctx context.Context, c *worker.Call, in weatherIn) (string, error) {
				runs.Add(1)
				got <- in
				return "ok", nil
			}); err != nil {
			t.Fatal(err)
		}
	})
	res := f.exec(t, execEvent(t, "weather", "c1", `{"city":"Oslo","days":3,"units":{"metric":true}}`), "weather")
	wantText(t, res, bus.StateSuccess, "ok")
	in := testkit.Recv(t, got, bound, "input")
	if in.City != "Oslo" || in.Days != 3 || !in.Units.Metric {
		t.Fatalf("decoded %+v", in)
	}

	// The router validates input, but a worker still refuses what does not
	// decode into In, without running fn.
	res = f.exec(t, execEvent(t, "weather", "c2", `{"city":5}`), "weather")
	if res.State != bus.StateError || len(res.Output) != 1 || !strings.HasPrefix(res.Output[0].Text, "Error: input does not decode") {
		t.Fatalf("undecodable input: %s", jsonOf(res))
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", runs.Load())
	}
}

type forecast struct {
	City string  `json:"city"`
	Temp float64 `json:"temp"`
}

// typed returns a registration of a typed tool that returns out, err.
func typed[Out any](out Out, err error) func(w *worker.Worker, name string) error {
	return func(w *worker.Worker, name string) error {
		return worker.Register(w, bus.ToolDef{Name: name, Description: "Out test."},
			func(ctx context.Context, c *worker.Call, in struct{}) (Out, error) { return out, err })
	}
}

func TestRegisterOutput(t *testing.T) {
	png := bus.Block{Type: bus.BlockData, MediaType: "image/png", Data: "aGk="}
	for _, tc := range []struct {
		name     string
		register func(w *worker.Worker, name string) error
		state    string
		output   []bus.Block
		metadata string
	}{
		{"string", typed("4°C, rain", nil), bus.StateSuccess, bus.Text("4°C, rain"), ""},
		{"empty_string", typed("", nil), bus.StateSuccess, bus.Text(""), ""},
		{"block", typed(png, nil), bus.StateSuccess, []bus.Block{png}, ""},
		{"blocks", typed([]bus.Block{{Type: bus.BlockText, Text: "a"}, png}, nil), bus.StateSuccess, []bus.Block{{Type: bus.BlockText, Text: "a"}, png}, ""},
		{"nil_blocks", typed([]bus.Block(nil), nil), bus.StateSuccess, []bus.Block{}, ""},
		{"exec_result", typed(&bus.ExecResult{State: bus.StateError, Output: bus.Text("partial"), Metadata: json.RawMessage(`{"k":1}`)}, nil),
			bus.StateError, bus.Text("partial"), `{"k":1}`},
		{"exec_result_no_state", typed(&bus.ExecResult{Output: bus.Text("fine")}, nil), bus.StateSuccess, bus.Text("fine"), ""},
		{"nil_exec_result", typed[*bus.ExecResult](nil, nil), bus.StateSuccess, []bus.Block{}, ""},
		{"struct", typed(forecast{City: "Oslo", Temp: 4.5}, nil), bus.StateSuccess, bus.Text(`{"city":"Oslo","temp":4.5}`), ""},
		{"pointer_struct", typed(&forecast{City: "Rome", Temp: 20}, nil), bus.StateSuccess, bus.Text(`{"city":"Rome","temp":20}`), ""},
		{"map", typed(map[string]int{"b": 2, "a": 1}, nil), bus.StateSuccess, bus.Text(`{"a":1,"b":2}`), ""},
		{"int", typed(42, nil), bus.StateSuccess, bus.Text("42"), ""},
		{"error", typed("ignored", errors.New("city not found")), bus.StateError, bus.Text("Error: city not found"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			f.startWorker(worker.Config{}, func(w *worker.Worker) {
				if err := tc.register(w, "tool"); err != nil {
					t.Fatal(err)
				}
			})
			ev := f.request(t, eventMsg(t, f.subj.Workers.Exec("tool"), execEvent(t, "tool", "c1", `{}`)))
			res := execResult(t, ev)
			if res.State != tc.state || !reflect.DeepEqual(res.Output, tc.output) {
				t.Fatalf("result %s, want state %s output %s", jsonOf(res), tc.state, jsonOf(tc.output))
			}
			if string(res.Metadata) != tc.metadata {
				t.Errorf("metadata %s, want %s", res.Metadata, tc.metadata)
			}
			// The wire form always has an output array.
			var wire map[string]json.RawMessage
			_ = json.Unmarshal(ev.Data, &wire)
			if out := string(wire["output"]); out == "" || out == "null" {
				t.Errorf("wire output %q, want an array", out)
			}
		})
	}
}

func TestRegisterOutputDoesNotEncode(t *testing.T) {
	f := newFixture(t, true)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		if err := typed(func() {}, nil)(w, "fn"); err != nil {
			t.Fatal(err)
		}
	})
	res := f.exec(t, execEvent(t, "fn", "c1", `{}`), "fn")
	if res.State != bus.StateError || len(res.Output) != 1 || !strings.HasPrefix(res.Output[0].Text, "Error: output does not encode") {
		t.Fatalf("result %s", jsonOf(res))
	}
}

func TestHandlerError(t *testing.T) {
	f := newFixture(t, true)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "fails", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			return textOut("ignored"), errors.New("disk full")
		})
	})
	wantText(t, f.exec(t, execEvent(t, "fails", "c1", `{}`), "fails"), bus.StateError, "Error: disk full")
}

func TestPanicIsErrorResultAndWorkerSurvives(t *testing.T) {
	f := newFixture(t, true)
	f.startWorker(worker.Config{MaxConcurrent: 1}, func(w *worker.Worker) {
		if err := worker.Register(w, bus.ToolDef{Name: "boom", Description: "Panics."},
			func(ctx context.Context, c *worker.Call, in struct{}) (string, error) { panic("kaboom") }); err != nil {
			t.Fatal(err)
		}
		raw(t, w, "fine", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return textOut("still here"), nil })
	})
	// With one slot, a panic that leaked the slot would block every later call.
	for i := range 3 {
		res := f.exec(t, execEvent(t, "boom", "b"+string(rune('0'+i)), `{}`), "boom")
		if res.State != bus.StateError || len(res.Output) != 1 || !strings.HasPrefix(res.Output[0].Text, "Error: ") || !strings.Contains(res.Output[0].Text, "kaboom") {
			t.Fatalf("panic result %s", jsonOf(res))
		}
	}
	wantText(t, f.exec(t, execEvent(t, "fine", "c1", `{}`), "fine"), bus.StateSuccess, "still here")
}

func TestHandleRaw(t *testing.T) {
	f := newFixture(t, true)
	got := make(chan *worker.Call, 1)
	f.startWorker(worker.Config{}, func(w *worker.Worker) {
		raw(t, w, "rawtool", func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) {
			got <- c
			return &bus.ExecResult{Output: []bus.Block{{Type: bus.BlockText, Text: "raw:" + string(c.Input)}}, Metadata: json.RawMessage(`{"m":true}`)}, nil
		})
	})
	ev := execEvent(t, "rawtool", "toolu_01", `{"path":"/tmp","n":[1,2]}`, func(e *bus.Event, r *bus.ExecRequest) {
		e.SessionID, e.ReplyID = "sess-9", "reply_7"
		r.User = json.RawMessage(`"alice"`)
		r.Context = json.RawMessage(`{"tenant":"acme","limits":{"n":3}}`)
		r.Attempt = 2
		r.State = json.RawMessage(`{"k":"v"}`)
	})
	reply := f.request(t, eventMsg(t, f.subj.Workers.Exec("rawtool"), ev))
	res := execResult(t, reply)
	wantText(t, res, bus.StateSuccess, `raw:{"path":"/tmp","n":[1,2]}`)
	if string(res.Metadata) != `{"m":true}` {
		t.Errorf("metadata %s", res.Metadata)
	}
	if reply.SessionID != "sess-9" || reply.ReplyID != "reply_7" || reply.ToolCallID != "toolu_01" || reply.Source != "toolbus/worker/w1" {
		t.Errorf("reply attributes %+v", reply)
	}
	c := testkit.Recv(t, got, bound, "call")
	if c.ID != "toolu_01" || c.Name != "rawtool" || c.SessionID != "sess-9" || c.ReplyID != "reply_7" || c.Attempt != 2 ||
		string(c.State) != `{"k":"v"}` || string(c.Context) != `{"tenant":"acme","limits":{"n":3}}` {
		t.Fatalf("call %+v", c)
	}
	if c.UserString() != "alice" {
		t.Errorf("UserString %q", c.UserString())
	}
	var tenant string
	if ok, err := c.ContextValue("tenant", &tenant); !ok || err != nil || tenant != "acme" {
		t.Errorf("ContextValue(tenant) = %v, %v, %q", ok, err, tenant)
	}
	var limits struct{ N int }
	if ok, err := c.ContextValue("limits", &limits); !ok || err != nil || limits.N != 3 {
		t.Errorf("ContextValue(limits) = %v, %v, %+v", ok, err, limits)
	}
	if ok, err := c.ContextValue("absent", &tenant); ok || err != nil {
		t.Errorf("ContextValue(absent) = %v, %v", ok, err)
	}
}

func TestCallContextHelpers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		user     string
		context  string
		wantUser string
		wantOK   bool
		wantErr  bool
	}{
		{"string user", `"bob"`, `{"k":1}`, "bob", true, false},
		{"object user", `{"id":7}`, `{"k":1}`, `{"id":7}`, true, false},
		{"no user", ``, `{"k":1}`, ``, true, false},
		{"no context", `"bob"`, ``, "bob", false, false},
		{"context not an object", `"bob"`, `[1]`, "bob", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &worker.Call{User: json.RawMessage(tc.user), Context: json.RawMessage(tc.context)}
			if got := c.UserString(); got != tc.wantUser {
				t.Errorf("UserString = %q, want %q", got, tc.wantUser)
			}
			var v int
			ok, err := c.ContextValue("k", &v)
			if ok != tc.wantOK || (err != nil) != tc.wantErr {
				t.Errorf("ContextValue = %v, %v; want ok %v err %v", ok, err, tc.wantOK, tc.wantErr)
			}
			// A Call made outside a worker has nowhere to send progress.
			if err := c.Progress(bus.Text("x")...); err != nil {
				t.Errorf("Progress outside a worker: %v", err)
			}
		})
	}
}

func TestHandleRejects(t *testing.T) {
	noop := func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return nil, nil }
	for _, tc := range []struct {
		name  string
		first string // a tool added before, "" for none
		tool  string
	}{
		{"duplicate", "echo", "echo"},
		{"empty", "", ""},
		{"dot", "", "a.b"},
		{"space", "", "a b"},
		{"wildcard", "", "*"},
		{"too long", "", strings.Repeat("x", 65)},
		{"unicode", "", "wétter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := worker.New(nil, worker.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.first != "" {
				if err := w.Handle(bus.ToolDef{Name: tc.first, InputSchema: objectSchema}, noop); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Handle(bus.ToolDef{Name: tc.tool, InputSchema: objectSchema}, noop); err == nil {
				t.Fatalf("tool %q accepted", tc.tool)
			}
			err = worker.Register(w, bus.ToolDef{Name: tc.tool}, func(ctx context.Context, c *worker.Call, in struct{}) (string, error) { return "", nil })
			if err == nil {
				t.Fatalf("typed tool %q accepted", tc.tool)
			}
		})
	}
	// The longest valid name is fine.
	w, _ := worker.New(nil, worker.Config{})
	if err := w.Handle(bus.ToolDef{Name: strings.Repeat("x", 64), InputSchema: objectSchema}, noop); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadID(t *testing.T) {
	for _, id := range []string{"a.b", "w 1", strings.Repeat("w", 129), "*"} {
		if _, err := worker.New(nil, worker.Config{ID: id}); err == nil {
			t.Errorf("id %q accepted", id)
		}
	}
	w, err := worker.New(nil, worker.Config{})
	if err != nil || !bus.ValidID(w.ID()) {
		t.Fatalf("random id %q, %v", w.ID(), err)
	}
}

func TestAddAfterStart(t *testing.T) {
	f := newFixture(t, true)
	noop := func(ctx context.Context, c *worker.Call) (*bus.ExecResult, error) { return nil, nil }
	w := f.startWorker(worker.Config{}, func(w *worker.Worker) { raw(t, w, "first", noop) })
	if err := w.Handle(bus.ToolDef{Name: "late", InputSchema: objectSchema}, noop); !errors.Is(err, worker.ErrStarted) {
		t.Errorf("Handle after Start: %v, want ErrStarted", err)
	}
	err := worker.Register(w, bus.ToolDef{Name: "late2"}, func(ctx context.Context, c *worker.Call, in struct{}) (string, error) { return "", nil })
	if !errors.Is(err, worker.ErrStarted) {
		t.Errorf("Register after Start: %v, want ErrStarted", err)
	}
	if err := w.Start(t.Context()); !errors.Is(err, worker.ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}
	// The late tools are not served.
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	_, err = f.nc.RequestMsgWithContext(ctx, eventMsg(t, f.subj.Workers.Exec("late"), execEvent(t, "late", "c1", `{}`)))
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("late tool answered: %v", err)
	}
}
