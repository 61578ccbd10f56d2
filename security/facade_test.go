package security_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/security"
)

// TestFacadeAnswers: the facade may answer the bridged servers' question
// tools it is given (mcp__<server>__elicit) and no other external tool;
// anything else in FacadeAnswers is refused.
func TestFacadeAnswers(t *testing.T) {
	users, err := security.Users(security.Spec{FacadeAnswers: []string{"mcp__t__elicit"}})
	if err != nil {
		t.Fatal(err)
	}
	f, ok := security.Lookup(users, security.RoleFacade)
	if !ok {
		t.Fatal("no facade user")
	}
	var answers []string
	for _, p := range f.Permissions.Publish {
		if strings.HasPrefix(p, "toolbus.answer.") {
			answers = append(answers, p)
		}
	}
	if !slices.Equal(answers, []string{"toolbus.answer.mcp__t__elicit"}) {
		t.Fatalf("facade answers %v", answers)
	}
	users, _ = security.Users(security.Spec{})
	f, _ = security.Lookup(users, security.RoleFacade)
	for _, p := range f.Permissions.Publish {
		if strings.HasPrefix(p, "toolbus.answer.") {
			t.Fatalf("the default facade answers %s", p)
		}
	}
	for _, bad := range []string{"deploy", "mcp__t__ask", "mcp____elicit", "*", "mcp__t.x__elicit"} {
		if _, err := security.Users(security.Spec{FacadeAnswers: []string{bad}}); err == nil {
			t.Errorf("FacadeAnswers %q accepted", bad)
		}
	}
}
