package skills_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolbus/toolbus/skills"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("x", 1025)
	for _, tc := range []struct {
		name, folder, data string
		rule               string // substring of the error's rule; "" for valid
	}{
		{"valid", "pdf", "---\nname: pdf\ndescription: Read PDFs.\n---\n# PDF\nDo it.\n", ""},
		{"crlf", "pdf", "---\r\nname: pdf\r\ndescription: Read PDFs.\r\n---\r\nBody\r\n", ""},
		{"bom", "pdf", "\ufeff---\nname: pdf\ndescription: d\n---\nBody", ""},
		{"no opening", "pdf", "name: pdf\n", "must start with a '---' line"},
		{"no closing", "pdf", "---\nname: pdf\ndescription: d\nBody\n", "no closing '---'"},
		{"closing at end, no body", "pdf", "---\nname: pdf\ndescription: d\n---", "body is empty"},
		{"empty body", "pdf", "---\nname: pdf\ndescription: d\n---\n \n\n", "body is empty"},
		{"missing name", "pdf", "---\ndescription: d\n---\nBody", "'name' is required"},
		{"empty front matter", "pdf", "---\n---\nBody", "'name' is required"},
		{"name not string", "pdf", "---\nname: 12\ndescription: d\n---\nBody", "'name' must be a string, got a number"},
		{"upper case", "Pdf", "---\nname: Pdf\ndescription: d\n---\nBody", "lower-case letters"},
		{"leading hyphen", "-pdf", "---\nname: -pdf\ndescription: d\n---\nBody", "not starting or ending"},
		{"trailing hyphen", "pdf-", "---\nname: pdf-\ndescription: d\n---\nBody", "not starting or ending"},
		{"double hyphen", "a--b", "---\nname: a--b\ndescription: d\n---\nBody", "single hyphens"},
		{"too long name", strings.Repeat("a", 65), "---\nname: " + strings.Repeat("a", 65) + "\ndescription: d\n---\nBody", "longer than 64"},
		{"name differs from folder", "other", "---\nname: pdf\ndescription: d\n---\nBody", `differs from its folder name "other"`},
		{"missing description", "pdf", "---\nname: pdf\n---\nBody", "description is empty"},
		{"blank description", "pdf", "---\nname: pdf\ndescription: '  '\n---\nBody", "description is empty"},
		{"long description", "pdf", "---\nname: pdf\ndescription: " + long + "\n---\nBody", "longer than 1024"},
		{"description 1024 runes", "pdf", "---\nname: pdf\ndescription: " + strings.Repeat("é", 1024) + "\n---\nBody", ""},
		{"long compatibility", "pdf", "---\nname: pdf\ndescription: d\ncompatibility: " + strings.Repeat("c", 501) + "\n---\nBody", "compatibility is 501 characters"},
		{"metadata not map", "pdf", "---\nname: pdf\ndescription: d\nmetadata: [1]\n---\nBody", "'metadata' must be a mapping"},
		{"metadata value not string", "pdf", "---\nname: pdf\ndescription: d\nmetadata: {a: 1}\n---\nBody", `metadata "a" must be a string`},
		{"not yaml", "pdf", "---\nname: [pdf\n---\nBody", "front matter is not YAML"},
		{"not a mapping", "pdf", "---\n- a\n- b\n---\nBody", "front matter is not YAML"},
		{"not utf-8", "pdf", "---\nname: pdf\ndescription: \xff\xfe\n---\nBody", "not UTF-8"},
		{"huge front matter", "pdf", "---\nname: pdf\ndescription: d\nx: " + strings.Repeat("y", 70<<10) + "\n---\nBody", "larger than 64 KiB"},
		{"huge unclosed", "pdf", "---\n" + strings.Repeat("y", 70<<10), "larger than 64 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, body, err := skills.Parse(tc.folder+"/SKILL.md", tc.folder, []byte(tc.data))
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if strings.Contains(body, "\r") || strings.TrimSpace(body) == "" {
					t.Fatalf("body %q", body)
				}
				return
			}
			var se *skills.Error
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want a *skills.Error", err)
			}
			if se.File != tc.folder+"/SKILL.md" || !strings.Contains(se.Rule, tc.rule) {
				t.Fatalf("error %q, want file %s/SKILL.md and rule containing %q", err, tc.folder, tc.rule)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	m, body, err := skills.Parse("x/SKILL.md", "x", []byte("---\nname: x\ndescription: D\nlicense: MIT\ncompatibility: linux\n"+
		"allowed-tools: shell  read_file\nmetadata:\n  author: me\nversion: 2\nextra: hi\n---\n\n# Title\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.License != "MIT" || m.Compatibility != "linux" || len(m.AllowedTools) != 2 || m.AllowedTools[1] != "read_file" {
		t.Fatalf("meta %+v", m)
	}
	if m.Metadata["author"] != "me" || m.Metadata["version"] != "2" || m.Metadata["extra"] != "hi" {
		t.Fatalf("metadata %v", m.Metadata)
	}
	if body != "# Title\n" {
		t.Fatalf("body %q", body)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"---\nname: pdf\ndescription: Read PDFs.\n---\nBody\n",
		"---\r\nname: pdf\r\ndescription: d\r\n---\r\nBody",
		"---\ndescription: d\n---\nBody",
		"---\nname: PDF\ndescription: d\n---\nBody",
		"---\nname: pdf\ndescription: d\nBody",
		"---\nname: &a [*a]\n---\nx",
		"\x00\x01\x02\xff",
		"---\n" + strings.Repeat("a: b\n", 20000) + "---\nx",
	} {
		f.Add("pdf", []byte(s))
	}
	f.Fuzz(func(t *testing.T, folder string, data []byte) {
		m, body, err := skills.Parse("f/SKILL.md", folder, data)
		if err != nil {
			var se *skills.Error
			if !errors.As(err, &se) || se.File != "f/SKILL.md" || se.Rule == "" {
				t.Fatalf("error %v is not a *skills.Error naming the file and a rule", err)
			}
			return
		}
		switch {
		case m.Name != folder || skills.CheckName(m.Name) != nil:
			t.Fatalf("accepted name %q for folder %q", m.Name, folder)
		case m.Description == "" || utf8.RuneCountInString(m.Description) > skills.MaxDescriptionLen:
			t.Fatalf("accepted description %q", m.Description)
		case strings.TrimSpace(body) == "" || !utf8.ValidString(body):
			t.Fatalf("accepted body %q", body)
		case utf8.RuneCountInString(m.Compatibility) > skills.MaxCompatibilityLen:
			t.Fatalf("accepted compatibility of %d", len(m.Compatibility))
		}
	})
}
