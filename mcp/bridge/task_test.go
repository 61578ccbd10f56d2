package bridge

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestTask: a tool with taskSupport "required" is registered as such and
// runs as an MCP task (one bus call, with the server's progress); the
// bus call cancelled cancels the task.
func TestTask(t *testing.T) {
	for _, tr := range []string{TransportStdio, TransportHTTP, TransportSSE} {
		t.Run(tr, func(t *testing.T) {
			e := newEnv(t)
			var s Server
			cancelled := func(string) bool { return false }
			if tr == TransportStdio {
				var cancelFile string
				s, _, cancelFile = stdioServer(t, "t")
				cancelled = func(id string) bool {
					b, _ := os.ReadFile(cancelFile)
					return strings.Contains(string(b), id+"\n")
				}
			} else {
				rec := newRecorder()
				s = Server{Transport: tr, URL: startHTTP(t, tr == TransportSSE, rec).url()}
				cancelled = rec.wasCancelled
			}
			s.Name, s.EnableTools = "t", []string{"research"}
			e.bridge(&File{Servers: []Server{s}})
			defs := e.waitTools([]string{"mcp__t__research"}, nil)
			if d := defs["mcp__t__research"]; d.MCP == nil || d.MCP.TaskSupport != "required" {
				t.Fatalf("definition: %+v", d.MCP)
			}
			ev, reply := e.publish2("mcp__t__research", "r1", map[string]any{"id": "r1"})
			var progress []string
			r := func() bus.Result {
				timeout := time.After(bound)
				for {
					select {
					case m := <-ev.C:
						if m.Type == bus.TypeCallProgress {
							var p bus.Progress
							_ = m.DataAs(&p)
							progress = append(progress, p.Output[0].Text)
						}
						if m.Type == bus.TypeCallResult && m.ReplyID == reply {
							var r bus.Result
							_ = m.DataAs(&r)
							return r
						}
					case <-timeout:
						t.Fatal("no result")
					}
				}
			}()
			if r.State != bus.StateSuccess || len(r.Output) != 2 || r.Output[0].Text != "researched r1" ||
				r.Output[1].Data != base64.StdEncoding.EncodeToString([]byte(`{"id":"r1"}`)) {
				t.Fatalf("task result: %+v", r)
			}
			if len(progress) == 0 || !strings.Contains(strings.Join(progress, "|"), "researching") {
				t.Errorf("progress: %v", progress)
			}

			// Cancelled: the task is cancelled on the server.
			ev, reply = e.publish2("mcp__t__research", "r2", map[string]any{"id": "r2", "ms": 3000})
			timeout := time.After(bound)
		started:
			for {
				select {
				case m := <-ev.C:
					if m.Type == bus.TypeCallProgress && m.ReplyID == reply {
						break started
					}
				case <-timeout:
					t.Fatal("the task never started")
				}
			}
			if err := e.client.Cancel(t.Context(), "s1", reply); err != nil {
				t.Fatal(err)
			}
			if r := resultOf(t, ev, reply, "r2"); r.State != bus.StateInterrupted {
				t.Fatalf("cancelled task: %+v", r)
			}
			testkit.CheckFor(t, bound, 20*time.Millisecond, func() error {
				if !cancelled("tasks/cancel") {
					return errNotYet
				}
				return nil
			})
		})
	}
}
