package builtin

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DefaultShellPath is the shell's PATH unless --shell-env names PATH: the
// system's program directories only, never the base directory.
const DefaultShellPath = "/usr/local/bin:/usr/bin:/bin"

// envName is the shape of a name --shell-env may pass.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnvNames refuses --shell-env names that are not variable names,
// that hold the router's credentials (NATS_*, TOOLBUS_*, the OTLP
// exporter's headers) or that the shell sets itself.
func checkEnvNames(names []string) error {
	for _, n := range names {
		u := strings.ToUpper(n)
		switch {
		case !envName.MatchString(n):
			return fmt.Errorf("--shell-env: %q is not an environment variable name", n)
		case strings.HasPrefix(u, "NATS_"), strings.HasPrefix(u, "TOOLBUS_"), strings.HasPrefix(u, "OTEL_EXPORTER_OTLP") && strings.Contains(u, "HEADERS"):
			return fmt.Errorf("--shell-env: %s may hold the router's credentials; the shell never gets it", n)
		case slices.Contains([]string{"HOME", "TMPDIR", "SKILL_DIR", "PWD", "OLDPWD"}, u), strings.HasPrefix(u, "GIT_CONFIG"), strings.HasPrefix(u, "GIT_ATTR"),
			slices.Contains([]string{"GIT_PAGER", "GIT_EDITOR", "PAGER", "GIT_TERMINAL_PROMPT"}, u):
			return fmt.Errorf("--shell-env: the shell sets %s itself", n)
		}
	}
	return nil
}

// gitHardening is configuration that git reads from the environment with
// command-line precedence (GIT_CONFIG_COUNT, over any repository's own
// config, which the agent may manage to write): no hooks, no fsmonitor,
// pager or editor programs, plain ssh and gpg, no proxy command or
// credential helper, no ext:: or local transport (whose upload-pack runs
// here), no implicit bare repositories. Set when an allow-list is.
var gitHardening = [][2]string{
	{"core.hooksPath", "/dev/null"},
	{"core.fsmonitor", "false"},
	{"core.pager", "cat"},
	{"core.editor", "false"},
	{"sequence.editor", "false"},
	{"core.sshCommand", "ssh"},
	{"core.gitProxy", ""},
	{"core.askPass", ""},
	{"credential.helper", ""},
	{"diff.external", ""},
	{"gpg.program", "gpg"},
	{"gpg.ssh.program", "ssh-keygen"},
	{"core.attributesFile", "/dev/null"},
	{"commit.gpgSign", "false"},
	{"tag.gpgSign", "false"},
	{"gpg.format", "openpgp"},
	{"gpg.openpgp.program", "gpg"},
	{"gpg.x509.program", "gpgsm"},
	{"gpg.ssh.defaultKeyCommand", ""},
	{"submodule.recurse", "false"},
	{"protocol.allow", "never"},
	{"protocol.https.allow", "always"},
	{"protocol.http.allow", "always"},
	{"protocol.ssh.allow", "always"},
	{"protocol.git.allow", "always"},
	{"protocol.ext.allow", "never"},
	// Local transports run remote.<name>.uploadpack on this machine.
	{"protocol.file.allow", "never"},
	{"safe.bareRepository", "explicit"},
	// Symlinks a checkout or git apply writes from content come out as
	// plain files: a patch that made d -> r3/.git let "cp evil d/config"
	// in the same command write r3/.git/config (issue 26, held-out attack).
	{"core.symlinks", "false"},
}

// shellEnv builds the command's environment from nothing: PATH (the
// default, or the router's when names has PATH), HOME the base directory,
// TMPDIR the call's private directory, LANG and LC_ALL C.UTF-8 unless
// named, then exactly the variables names lists, from lookup (os.LookupEnv
// in production); with hardenGit the git configuration above.
func shellEnv(lookup func(string) (string, bool), names []string, home, tmp string, hardenGit bool) []string {
	env := []string{}
	set := map[string]bool{}
	add := func(k, v string) {
		if !set[k] {
			set[k] = true
			env = append(env, k+"="+v)
		}
	}
	for _, n := range names {
		if v, ok := lookup(n); ok {
			add(n, v)
		}
	}
	add("PATH", DefaultShellPath)
	add("HOME", home)
	add("TMPDIR", tmp)
	add("LANG", "C.UTF-8")
	add("LC_ALL", "C.UTF-8")
	if hardenGit {
		add("GIT_CONFIG_COUNT", fmt.Sprint(len(gitHardening)))
		for i, kv := range gitHardening {
			add(fmt.Sprintf("GIT_CONFIG_KEY_%d", i), kv[0])
			add(fmt.Sprintf("GIT_CONFIG_VALUE_%d", i), kv[1])
		}
		// No system or global config (HOME is the base directory, so
		// $HOME/.gitconfig would be a file the agent writes), no system
		// attributes.
		add("GIT_CONFIG_NOSYSTEM", "1")
		add("GIT_CONFIG_GLOBAL", "/dev/null")
		add("GIT_ATTR_NOSYSTEM", "1")
		add("GIT_TERMINAL_PROMPT", "0")
		add("GIT_PAGER", "cat") // over pager.<command> too
		add("PAGER", "cat")
		add("GIT_EDITOR", "false")
	}
	return env
}
