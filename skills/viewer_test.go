package skills

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

func TestViewer(t *testing.T) {
	pdf := &Skill{Meta: Meta{Name: "pdf", Description: "PDF forms."}, Body: "\n# PDF\n\nUse pdftotext.\n"}
	v := &View{skills: []*Skill{pdf}}
	groups := []bus.Group{{Name: "docs", ActivateOnSkill: "pdf"}}
	for _, tc := range []struct {
		name, input, code, text string
		activate                []string
	}{
		{"body only", `{"skill":"pdf"}`, "", "# PDF\n\nUse pdftotext.", []string{"docs"}},
		{"unknown", `{"skill":"nope"}`, bus.CodeInvalidInput, "SkillNotFoundError: Skill 'nope' not found.", nil},
		{"bad input", `{"skill":1}`, bus.CodeInvalidInput, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := v.View(groups, json.RawMessage(tc.input))
			if out.Code != tc.code {
				t.Fatalf("code %q, want %q (%v)", out.Code, tc.code, out.Output)
			}
			if tc.text != "" && (len(out.Output) != 1 || out.Output[0].Text != tc.text) {
				t.Fatalf("output %+v, want %q", out.Output, tc.text)
			}
			if len(out.Activate) != len(tc.activate) {
				t.Fatalf("activate %v, want %v", out.Activate, tc.activate)
			}
		})
	}
	if _, ok := (&View{}).ViewerDef(); ok {
		t.Fatal("a view without skills offers the viewer")
	}
	d, ok := v.ViewerDef()
	if !ok || d.Name != ViewerName || !d.ReadOnly || d.ConcurrencySafe || d.Permission != bus.PermissionAllow {
		t.Fatalf("definition %+v", d)
	}
}
