package security_test

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/security"
)

// TestRunnerImportsOwnSubjects (docs/security.md "Accounts"): a tool
// runner's account imports as services only what its login may publish, so
// an answer the server passes on through an import lands on nothing the login
// is denied, and the streams its login reads: the worker's has no events.
func TestRunnerImportsOwnSubjects(t *testing.T) {
	users, err := security.Users(security.Spec{WorkerTools: []string{"greet"}})
	if err != nil {
		t.Fatal(err)
	}
	conf := security.ServerConfig("", users, nil)
	worker, bridge, _ := strings.Cut(conf[strings.Index(conf, `"toolbus-worker": {`):], `"toolbus-bridge": {`)
	for _, tc := range []struct {
		account, block string
		want, never    []string
	}{
		{"worker", worker, []string{`service: {account: "toolbus", subject: "toolbus.register.greet"}`, `stream: {account: "toolbus", subject: "toolbus.exec.>"}`},
			[]string{`"toolbus.register"}`, "toolbus.register.*", "toolbus.ask.", "toolbus.call.", `service: {account: "toolbus", subject: "toolbus.cancel.`, "toolbus.events.", "toolbus.resources."}},
		{"bridge", bridge, []string{`"toolbus.ask.*"`, `"toolbus.call.*"`, `service: {account: "toolbus", subject: "toolbus.cancel.*"}`, `stream: {account: "toolbus", subject: "toolbus.events.>"}`},
			[]string{`"toolbus.register"}`, `"toolbus.ask.>"`, `"toolbus.call.>"`}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.block, w) {
				t.Errorf("%s: no %s in\n%s", tc.account, w, tc.block)
			}
		}
		for _, n := range tc.never {
			if strings.Contains(tc.block, n) {
				t.Errorf("%s: %s in\n%s", tc.account, n, tc.block)
			}
		}
	}
}
