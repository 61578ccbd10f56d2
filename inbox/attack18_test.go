package inbox_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/bus"
)

// TestAttackInboxBidi (session 18, red team): an agent parks a call whose
// input holds bidirectional controls (U+202E right-to-left override,
// U+2066 left-to-right isolate): the page showed the input, set with
// textContent, reordered by the browser, so the approver read other text
// than the call's ("Trojan source"). The page now shows every control and
// bidirectional character as \uXXXX.
func TestAttackInboxBidi(t *testing.T) {
	e := newEnv(t)
	notes := "harmless \u202e~ fr- mr \u2066x\u2069 \u0085end"
	k := e.park(t, "s9", "r9", "deploy", deployIn{Env: "prod", Notes: notes}, bus.KindConfirm)
	e.run(t, e.tab, chromedp.WaitVisible(css(card(k))), chromedp.Click(css(card(k)+" .head")),
		chromedp.WaitVisible(css(card(k)+" pre.input")))
	shown := get(t, e.tab, chromedp.Text(css(card(k)+" pre.input")))
	if i := strings.IndexFunc(shown, func(r rune) bool {
		return unicode.Is(unicode.Bidi_Control, r) || r != '\n' && unicode.IsControl(r)
	}); i >= 0 {
		t.Fatalf("the page shows %q raw in the input:\n%s", shown[i:i+3], shown)
	}
	if !strings.Contains(shown, `\u202e~ fr- mr \u2066x\u2069`) {
		t.Fatalf("the input is not shown escaped:\n%s", shown)
	}
}
