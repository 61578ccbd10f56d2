package skills_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/skills"
)

func skillMD(name, desc string) []byte {
	return []byte("---\nname: " + name + "\ndescription: " + desc + "\n---\n# " + name + "\nDo the thing.\n")
}

func mustSkill(t *testing.T, name string, extra map[string][]byte) *skills.Skill {
	t.Helper()
	files := map[string][]byte{"SKILL.md": skillMD(name, "About "+name+".")}
	for k, v := range extra {
		files[k] = v
	}
	s, err := skills.New(name, "dir:/skills/"+name, files)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLoader(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	pdf := mustSkill(t, "pdf", map[string][]byte{"scripts/fill.py": []byte("print(1)\n"), "assets/logo.png": png,
		"references/forms.md": []byte("# Forms\n")})
	web := mustSkill(t, "web", nil)
	gs := []bus.Group{{Name: "docs", Scope: bus.ScopeMeta, ActivateOnSkill: "pdf"}, {Name: "browse", Scope: bus.ScopeMeta, Skills: []string{"web"}},
		{Name: "print", Scope: bus.ScopeExternal, ActivateOnSkill: "pdf"}}
	v := skills.NewView([]*skills.Skill{pdf, web}, gs, func(string) bool { return false })
	if got := v.Names(); !slices.Equal(got, []string{"pdf"}) {
		t.Fatalf("visible %v: web belongs to the inactive group browse", got)
	}
	all := skills.NewView([]*skills.Skill{web, pdf}, gs, func(g string) bool { return g == "browse" })
	def, ok := all.LoaderDef()
	if !ok {
		t.Fatal("no loader")
	}
	var schema struct {
		Properties struct {
			SkillID struct {
				Enum []string `json:"enum"`
			} `json:"skillId"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(def.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(schema.Properties.SkillID.Enum, []string{"pdf", "web"}) || !slices.Equal(schema.Required, []string{"skillId", "path"}) {
		t.Fatalf("schema %s", def.InputSchema)
	}
	if !def.ReadOnly || def.ConcurrencySafe {
		t.Fatalf("flags %+v", def)
	}
	if _, ok := skills.NewView(nil, gs, nil).LoaderDef(); ok {
		t.Fatal("loader without skills")
	}

	load := func(id, p string) skills.Outcome {
		in, _ := json.Marshal(skills.LoadInput{SkillID: id, Path: p})
		return v.Load(gs, in)
	}
	out := load("pdf", "SKILL.md")
	if out.Code != "" || len(out.Output) != 1 || out.Output[0].Text != "Skill: pdf\nDescription: About pdf.\nSource: dir:/skills/pdf\n\n# pdf\nDo the thing.\n" {
		t.Fatalf("SKILL.md: %+v", out)
	}
	if !slices.Equal(out.Activate, []string{"docs", "print"}) {
		t.Fatalf("activate %v", out.Activate)
	}
	if out := load("pdf", "scripts/fill.py"); out.Code != "" || out.Output[0].Text != "print(1)\n" {
		t.Fatalf("script: %+v", out)
	}
	out = load("pdf", "assets/logo.png")
	if b := out.Output[0]; out.Code != "" || b.Type != bus.BlockData || b.MediaType != "image/png" || b.Data != base64.StdEncoding.EncodeToString(png) {
		t.Fatalf("binary: %+v", out)
	}
	avail := "Available resources:\n1. SKILL.md\n2. assets/logo.png\n3. references/forms.md\n4. scripts/fill.py"
	for _, p := range []string{"/etc/passwd", "../web/SKILL.md", "scripts/../SKILL.md", ".", "./SKILL.md", "scripts", "scripts/", "missing.txt", "skill.md", ""} {
		out := load("pdf", p)
		want := "Resource not found: '" + p + "' in skill 'pdf'.\n" + avail
		if out.Code != bus.CodeInvalidInput || out.Output[0].Text != want || out.Activate != nil {
			t.Errorf("path %q: %+v", p, out)
		}
	}
	if out := load("web", "SKILL.md"); out.Code != bus.CodeInvalidInput || out.Output[0].Text != "SkillNotFoundError: Skill 'web' not found." {
		t.Fatalf("invisible skill: %+v", out)
	}
	if p := v.Prompt(); !strings.Contains(p, "## pdf\nAbout pdf.") || strings.Contains(p, "web") || !strings.Contains(p, skills.LoaderName) {
		t.Fatalf("prompt %q", p)
	}
	if p := skills.NewView(nil, nil, nil).Prompt(); p != "" {
		t.Fatalf("empty prompt %q", p)
	}
}

func TestFolderSymlinkOutside(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(root, "secret.txt")
	write(t, secret, "top secret")
	dir := filepath.Join(root, "skills", "pdf")
	write(t, filepath.Join(dir, "SKILL.md"), string(skillMD("pdf", "PDFs.")))
	write(t, filepath.Join(dir, "notes.md"), "notes")
	if err := os.Symlink(secret, filepath.Join(dir, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes.md", filepath.Join(dir, "alias.md")); err != nil {
		t.Fatal(err)
	}
	s, err := skills.LoadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Resources(); !slices.Equal(got, []string{"SKILL.md", "alias.md", "notes.md"}) {
		t.Fatalf("resources %v", got)
	}
	out := skills.NewView([]*skills.Skill{s}, nil, nil).Load(nil, json.RawMessage(`{"skillId":"pdf","path":"leak.txt"}`))
	if out.Code != bus.CodeInvalidInput || !strings.HasPrefix(out.Output[0].Text, "Resource not found: 'leak.txt' in skill 'pdf'.") {
		t.Fatalf("symlink out: %+v", out)
	}
}

func TestLoadDir(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "good", "SKILL.md"), string(skillMD("good", "Good.")))
	write(t, filepath.Join(root, "bad", "SKILL.md"), string(skillMD("other", "Bad.")))
	write(t, filepath.Join(root, "plain", "README"), "not a skill")
	found, errs, err := skills.LoadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Name != "good" || len(errs) != 1 || !strings.Contains(errs[0].Error(), filepath.Join(root, "bad")) {
		t.Fatalf("found %v, errs %v", found, errs)
	}
	one, _, err := skills.LoadDir(filepath.Join(root, "good"))
	if err != nil || len(one) != 1 || one[0].Digest != found[0].Digest {
		t.Fatalf("one skill folder: %v %v", one, err)
	}
}

func TestPackRoundTrip(t *testing.T) {
	s := mustSkill(t, "pdf", map[string][]byte{"scripts/a.sh": []byte("echo hi"), "b/c.bin": {0, 1, 2}})
	data, err := skills.Pack(s.Files())
	if err != nil {
		t.Fatal(err)
	}
	files, err := skills.Unpack(data)
	if err != nil {
		t.Fatal(err)
	}
	if skills.Digest(files) != s.Digest {
		t.Fatal("digest changed through Pack and Unpack")
	}
	if _, err := skills.New("pdf", "x", map[string][]byte{"SKILL.md": skillMD("pdf", "d"), "../x": nil}); err == nil {
		t.Fatal("path outside accepted")
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
