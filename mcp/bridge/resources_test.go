package bridge

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// resourcesRequest sends one request of the resources verb and returns the
// reply event.
func (e *env) resourcesRequest(server, typ string, data any) *bus.Event {
	e.t.Helper()
	ev, err := bus.NewEvent(typ, "test/facade", data)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), bound)
	defer cancel()
	m, err := bus.SendRequest(ctx, e.client.Conn(), ResourcesSubject("", server), ev)
	if err != nil {
		e.t.Fatalf("%s: %v", typ, err)
	}
	r, err := bus.Decode(m)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// TestResources: the bridge lists a server's resources and templates and
// reads them (text, blob, a template's URI) on P.resources.<server>;
// unknown members and types are refused.
func TestResources(t *testing.T) {
	for _, tr := range []string{TransportStdio, TransportHTTP, TransportSSE} {
		t.Run(tr, func(t *testing.T) {
			e := newEnv(t)
			var s Server
			if tr == TransportStdio {
				s, _, _ = stdioServer(t, "t")
			} else {
				s = Server{Transport: tr, URL: startHTTP(t, tr == TransportSSE, newRecorder()).url()}
			}
			s.Name, s.EnableTools = "t", []string{"echo"}
			e.bridge(&File{Servers: []Server{s}})
			e.waitTools([]string{"mcp__t__echo"}, nil)

			r := e.resourcesRequest("t", TypeResourcesList, ResourcesList{})
			var l ResourcesListed
			if r.Type != TypeResourcesListed || r.DataAs(&l) != nil || l.Server != "t" || len(l.Resources) != 2 || len(l.Templates) != 1 {
				t.Fatalf("list: %s %s", r.Type, r.Data)
			}
			var notes Resource
			for _, res := range l.Resources {
				if res.URI == "file:///notes.txt" {
					notes = res
				}
			}
			if notes.Name != "mcp__t__notes" || notes.Description != "The notes." || notes.MediaType != "text/plain" ||
				notes.Annotations == nil || notes.Annotations.Audience[0] != "user" {
				t.Errorf("notes: %+v", notes)
			}
			if tp := l.Templates[0]; tp.Name != "mcp__t__logs" || tp.URITemplate != "file:///logs/{day}" {
				t.Errorf("template: %+v", tp)
			}

			for uri, want := range map[string]bus.Block{
				"file:///notes.txt":       {Type: bus.BlockText, Text: "remember", URI: "file:///notes.txt", MediaType: "text/plain"},
				"file:///logo.png":        {Type: bus.BlockData, Data: base64.StdEncoding.EncodeToString([]byte("png")), URI: "file:///logo.png", MediaType: "image/png"},
				"file:///logs/2026-12-01": {Type: bus.BlockText, Text: "log of file:///logs/2026-12-01", URI: "file:///logs/2026-12-01"},
			} {
				r := e.resourcesRequest("t", TypeResourcesRead, ResourcesRead{URI: uri})
				var c ResourcesContents
				if r.Type != TypeResourcesContents || r.DataAs(&c) != nil || len(c.Contents) != 1 || c.Contents[0] != want {
					t.Errorf("read %s: %s %s", uri, r.Type, r.Data)
				}
			}
			for _, tc := range []struct {
				typ  string
				data any
				code string
			}{
				{TypeResourcesRead, map[string]any{"uri": "file:///notes.txt", "url": "x"}, bus.CodeBadRequest},
				{TypeResourcesRead, map[string]any{}, bus.CodeBadRequest},
				{"io.toolbus.resources.delete", map[string]any{}, bus.CodeBadRequest},
				{TypeResourcesRead, map[string]any{"uri": "file:///none"}, bus.CodeToolError},
			} {
				r := e.resourcesRequest("t", tc.typ, tc.data)
				var be bus.Error
				if r.Type != bus.TypeError || r.DataAs(&be) != nil || be.Code != tc.code {
					t.Errorf("%s %v: %s %s", tc.typ, tc.data, r.Type, r.Data)
				}
			}
		})
	}
}
