package bus_test

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

func TestSubjectsPrefix(t *testing.T) {
	s := bus.NewSubjects("acme")
	for got, want := range map[string]string{
		s.Call("s1"):                    "acme.call.s1",
		s.Tools("s1"):                   "acme.tools.s1",
		s.Cancel("s1"):                  "acme.cancel.s1",
		s.Events("s1"):                  "acme.events.s1",
		s.Outputs("s1"):                 "acme.outputs.s1",
		s.Workers.Exec("echo"):          "acme.exec.echo",
		s.Handoffs.External("echo"):     "acme.external.echo",
		s.Handoffs.Confirm("echo"):      "acme.confirm.echo",
		s.Handoffs.Answer("echo"):       "acme.answer.echo",
		s.Admin("groups.put"):           "acme.admin.groups.put",
		s.Workers.SharedRegister():      "acme.register",
		s.Workers.Register("t"):         "acme.register.t",
		s.Workers.RegisterGroup("g"):    "acme.register.group.g",
		s.All("cancel"):                 "acme.cancel.>",
		s.RouterQueue():                 "acme-router",
		s.Workers.ExecQueue("echo"):     "acme-exec-echo",
		s.Bucket(bus.BucketSessions):    "acme_sessions",
		s.Stream(bus.StreamEvents):      "ACME_EVENTS",
		s.ObjectStore(bus.ObjectSkills): "acme_skills",
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
	if tok, ok := s.Token("acme.cancel.s-1", "cancel"); !ok || tok != "s-1" {
		t.Fatalf("Token = %q, %v", tok, ok)
	}
	if _, ok := s.Token("toolbus.cancel.s1", "cancel"); ok {
		t.Fatal("Token accepted another prefix")
	}
}

// FuzzToken checks that Token only returns a single non-empty token, and
// exactly the one the subject builders put there.
func FuzzToken(f *testing.F) {
	for _, seed := range []string{"toolbus.call.s1", "toolbus.call.", "toolbus.call.a.b", "toolbus.callx.a", "toolbus.call", "x", "", "toolbus.call..", "toolbus.call.*"} {
		f.Add(seed, "call")
	}
	f.Add("toolbus.cancel.s1", "cancel")
	f.Add("toolbus.a.b.c", "a.b")
	s := bus.NewSubjects("")
	f.Fuzz(func(t *testing.T, subject, kind string) {
		tok, ok := s.Token(subject, kind)
		if !ok {
			if tok != "" {
				t.Fatalf("token %q with ok false", tok)
			}
			return
		}
		if tok == "" || strings.Contains(tok, ".") {
			t.Fatalf("Token(%q, %q) = %q", subject, kind, tok)
		}
		if subject != "toolbus."+kind+"."+tok {
			t.Fatalf("Token(%q, %q) = %q does not rebuild the subject", subject, kind, tok)
		}
	})
}
