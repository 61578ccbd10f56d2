package security

import (
	"testing"
)

// TestTaskSubjects: a session's agent reaches its own task verbs
// (P.tasks.<s>) and NATS refuses it another session's; the shared agent
// is refused those of sessions with their own user.
func TestTaskSubjects(t *testing.T) {
	d := newDeployment(t)
	s1 := d.conn("session-s1")
	if list, err := s1.client().Tasks().List(testCtx(t), "s1"); err != nil || len(list) != 0 {
		t.Fatalf("s1 lists its own tasks: %v %+v", list, err)
	}
	d.conn("session-s2").denyPublish("toolbus.tasks.s1")
	d.conn("agent").denyPublish("toolbus.tasks.s1")
	s1.noViolations()
}
