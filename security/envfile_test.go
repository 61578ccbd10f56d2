package security_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/security"
)

// TestEnvFilesExport: the .env files Generate and AddAgent write export
// their variables, so that after `source FILE` (as the router's start-up
// line says) the commands the shell starts see them, in bash, zsh and fish
// (each where installed), even in a directory whose path needs quoting.
// A bare NATS_URL=... line set a shell variable only: the next toolbus
// command then went to $NATS_URL's default server instead.
func TestEnvFilesExport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's secure")
	url := "nats://127.0.0.1:4333"
	if _, err := security.Generate(dir, url, security.Spec{Prefix: "acme"}); err != nil {
		t.Fatal(err)
	}
	a, err := security.AddAgent(dir, "s1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	want := map[string]string{
		"NATS_URL":          url,
		"NATS_NKEY":         security.SeedFile(abs, "session-s1"),
		"NATS_INBOX_PREFIX": "_INBOX.session-s1",
	}
	// The child (env) prints only what the shell exported.
	shells := map[string][]string{
		"bash": {"-c", `source "$1" && env`, "bash"},
		"zsh":  {"-c", `source "$1" && env`, "zsh"},
		"fish": {"-c", `source $argv[1]; and env`},
	}
	ran := 0
	for sh, args := range shells {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		ran++
		cmd := exec.Command(path, append(args, a.Env)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: source %s: %v\n%s", sh, a.Env, err, out)
		}
		for name, value := range want {
			if !strings.Contains("\n"+string(out), "\n"+name+"="+value+"\n") {
				t.Errorf("%s: after source, the child does not see %s=%s:\n%s", sh, name, value, out)
			}
		}
	}
	if ran == 0 {
		t.Skip("no bash, zsh or fish installed")
	}
	// The router's own file too (Generate's, not AddAgent's).
	env, err := os.ReadFile(security.EnvFile(dir, "router"))
	if err != nil || !strings.HasPrefix(string(env), "export NATS_URL="+url+"\n") || !strings.Contains(string(env), "export NATS_INBOX_PREFIX=_INBOX.router\n") {
		t.Fatalf("router.env %q %v", env, err)
	}
}
