package builtin

import (
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/skills"
)

// Shell limits (docs/protocol.md 11).
const (
	DefaultShellTimeout = 120 * time.Second
	MaxShellTimeout     = 600 * time.Second
	// MaxStreamChars is where each of stdout and stderr is cut.
	MaxStreamChars = 30000
)

// SkillFiles puts a skill's files on disk for the shell tool: Acquire returns
// their directory and a release to call once the command ended.
type SkillFiles interface {
	Acquire(ctx context.Context, name, user string) (dir string, release func(), err error)
}

// ShellIn is the input of shell.
type ShellIn struct {
	Command   string `json:"command"`
	TimeoutMS int    `json:"timeout_ms,omitempty"`
	Skill     string `json:"skill,omitempty"`
}

// Shell runs commands in a base directory. Create it with NewShell.
type Shell struct {
	Dir    string     // the base directory, absolute and symlinks resolved
	Allow  []string   // programs it may start; empty (and no Trust) means any
	Trust  []string   // programs it may start with any arguments
	Skills SkillFiles // nil: no skill scripts

	env      []string    // names passed from the router's environment
	cred     *credential // nil: the router's user
	launcher bool        // through the sandbox launcher (Linux, hooked)
	landlock bool        // the launcher applies Landlock
	files    *Files      // resolves paths for git -C and the like
	// With an allow-list and the launcher: the files and directories the
	// kernel lets the command execute (execList).
	execFiles, execDirs []string
	lookup              func(string) (string, bool)
}

// credential is a resolved --shell-user.
type credential struct {
	uid, gid int
	groups   []int
}

// NewShell checks cfg and returns the shell. It refuses an allow-list
// entry that is not a plain program name or that runs other programs
// (env, xargs, eval ...), an environment name that holds credentials, and
// a user that does not exist (or that this process cannot switch to).
// ctx bounds the probe of git's helper directory (execList).
func NewShell(ctx context.Context, cfg Config) (*Shell, error) {
	f, err := NewFiles(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	if err := cmp.Or(checkAllowList(cfg.ShellAllow, cfg.ShellTrust), checkEnvNames(cfg.ShellEnv)); err != nil { // the first error
		return nil, err
	}
	s := &Shell{Dir: f.Base(), Allow: slices.Clone(cfg.ShellAllow), Trust: slices.Clone(cfg.ShellTrust), Skills: cfg.Skills, env: slices.Clone(cfg.ShellEnv), files: f, lookup: os.LookupEnv}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	userName := ShellUserFor(cfg.ShellUser, cfg.ShellAsRoot)
	if s.cred, err = shellCredential(cfg); err != nil {
		return nil, err
	}
	if s.cred == nil && os.Geteuid() == 0 {
		log.Warn("shell: commands run as root (--shell-as-root): they can read every file the sandbox leaves readable (/etc/shadow among them) and change what root owns in the base directory", "dir", s.Dir)
	}
	if s.cred != nil && !writableBy(s.Dir, s.cred) {
		log.Warn("shell: the base directory is not writable by the shell's user, so commands that write fail; give it to that user (chown) or name another with --shell-user", "dir", s.Dir, "uid", s.cred.uid)
	}
	abi := landlockABI()
	s.launcher = hooked.Load() && sandboxSupported
	s.landlock = s.launcher && abi > 0
	if s.restricted() && s.launcher {
		path := DefaultShellPath
		if v, ok := s.lookup("PATH"); ok && slices.Contains(s.env, "PATH") {
			path = v
		}
		s.execFiles, s.execDirs = execList(ctx, append(slices.Clone(s.Allow), s.Trust...), path)
	}
	switch {
	case s.landlock && s.restricted():
		log.Info("shell: kernel sandbox active (Landlock); the kernel executes only the allow-listed programs", "landlock_abi", abi, "dir", s.Dir, "user", userName,
			"executable", strings.Join(append(slices.Clone(s.execFiles), s.execDirs...), ","))
	case s.landlock:
		log.Info("shell: kernel sandbox active (Landlock)", "landlock_abi", abi, "dir", s.Dir, "user", userName)
	case s.launcher:
		log.Warn("shell: no kernel sandbox: this kernel has no Landlock, so commands reach every file their user can", "dir", s.Dir, "user", cfg.ShellUser)
	default:
		log.Warn("shell: no kernel sandbox and no subreaper: the binary does not call builtin.RunSandboxChild or the OS is not Linux; a command's setsid children can outlive it", "dir", s.Dir, "user", cfg.ShellUser)
	}
	return s, nil
}

// DefaultShellUser is the user a root router runs commands as without
// --shell-user or --shell-as-root (uid and gid 65534 when absent).
const DefaultShellUser = "nobody"

// ShellUserFor returns the user shell commands run as for --shell-user and
// --shell-as-root: user when set, else DefaultShellUser for a root process
// without asRoot, else "" (this process's user).
func ShellUserFor(user string, asRoot bool) string {
	switch {
	case user != "":
		return user
	case os.Geteuid() == 0 && !asRoot:
		return DefaultShellUser
	}
	return ""
}

// shellCredential is the credential of the user commands run as
// (ShellUserFor), nil for this process's: DefaultShellUser's is
// 65534:65534 when there is no such user.
func shellCredential(cfg Config) (*credential, error) {
	switch name := ShellUserFor(cfg.ShellUser, cfg.ShellAsRoot); {
	case name == "":
		return nil, nil
	case cfg.ShellUser == "":
		if c, err := lookupUser(name); err == nil {
			return c, nil
		}
		return &credential{uid: 65534, gid: 65534, groups: []int{65534}}, nil
	default:
		return lookupUser(name)
	}
}

// writableBy says whether the directory's mode lets c create files in it.
func writableBy(dir string, c *credential) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return false
	}
	uid, gid, ok := fileOwner(fi)
	m := fi.Mode().Perm()
	switch {
	case !ok:
		return true // not knowable here
	case uid == c.uid:
		return m&0o300 == 0o300
	case gid == c.gid || slices.Contains(c.groups, gid):
		return m&0o030 == 0o030
	}
	return m&0o003 == 0o003
}

// lookupUser resolves name, refusing a user that does not exist or one
// this process cannot switch to.
func lookupUser(name string) (*credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("--shell-user %s: %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("--shell-user %s: uid %q or gid %q is not a number", name, u.Uid, u.Gid)
	}
	c := &credential{uid: uid, gid: gid}
	ids, _ := u.GroupIds()
	for _, g := range ids {
		if n, err := strconv.Atoi(g); err == nil {
			c.groups = append(c.groups, n)
		}
	}
	if os.Geteuid() != 0 && os.Geteuid() != uid {
		return nil, fmt.Errorf("--shell-user %s: this process runs as uid %d, not root, so it cannot run commands as uid %d", name, os.Geteuid(), uid)
	}
	return c, nil
}

const shellSchemaBase = `{"type":"object","properties":{"command":{"type":"string","description":"The command, run by /bin/sh -c in the base directory."},` +
	`"timeout_ms":{"type":"integer","minimum":1,"maximum":600000,"description":"How long the command may run, in milliseconds (default 120000, at most 600000)."}`

func (s *Shell) def() bus.ToolDef {
	schema := shellSchemaBase
	desc := "Run a shell command in the base directory " + s.Dir + " and return its exit code, stdout and stderr (each cut after 30000 characters)."
	if s.restricted() {
		desc += " Only these programs may be started: " + strings.Join(append(slices.Clone(s.Allow), s.Trust...), ", ") + "."
	}
	if s.cred != nil {
		// Routers whose shells run as different users register different
		// definitions, so only one of them serves the tool (docs/operations.md).
		desc += fmt.Sprintf(" Commands run as uid %d.", s.cred.uid)
	}
	if s.Skills != nil {
		schema += `,"skill":{"type":"string","description":"The name of a skill whose scripts the command runs: its files are put in a folder, $SKILL_DIR names it, and the output says where it is."}`
		desc += " To run a skill's script, set skill to the skill's name and refer to its files through $SKILL_DIR, e.g. \"sh $SKILL_DIR/scripts/run.sh\"."
	}
	return bus.ToolDef{Name: "shell", Description: desc, InputSchema: json.RawMessage(schema + `},"required":["command"]}`),
		ReadOnly: false, ConcurrencySafe: false, RuleMatcher: bus.MatcherCommand, RuleField: "command", PathBase: s.Dir,
		TimeoutMS: int64((MaxShellTimeout + 10*time.Second) / time.Millisecond)}
}

// checkAllowed refuses a command that starts a program outside the
// allow-list, or that could start one the check cannot see.
func (s *Shell) checkAllowed(cmd string) error {
	if !s.restricted() {
		return nil
	}
	resolve := func(p string) (string, error) { return s.files.resolve("shell", p) }
	inside := func(p string) bool {
		_, err := resolve(p)
		return err == nil
	}
	return (&checker{allow: s.Allow, trust: s.Trust, inside: inside, resolve: resolve}).check(cmd)
}

// restricted says whether there is an allow-list (of checked or trusted
// programs).
func (s *Shell) restricted() bool { return len(s.Allow)+len(s.Trust) > 0 }

// Run runs the command; user is the batch's user (for user-scoped skills).
// A timeout is a refusal whose text holds the output so far. Every process
// the command started is gone when Run returns (docs/builtin.md).
func (s *Shell) Run(ctx context.Context, user string, in ShellIn) (string, error) {
	if strings.TrimSpace(in.Command) == "" {
		return "", fmt.Errorf("shell refused: the command is empty")
	}
	timeout := DefaultShellTimeout
	if in.TimeoutMS > 0 {
		timeout = time.Duration(in.TimeoutMS) * time.Millisecond
	}
	if timeout > MaxShellTimeout {
		return "", fmt.Errorf("shell refused: timeout_ms %d is more than 600000", in.TimeoutMS)
	}
	if err := s.checkAllowed(in.Command); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "toolbus-shell-")
	if err != nil {
		return "", fmt.Errorf("shell: the command could not run: %v", err)
	}
	defer os.RemoveAll(tmp)
	spec := sandboxSpec{Command: in.Command, Dir: s.Dir, Tmp: tmp, Landlock: s.landlock, UID: -1, GID: -1, Procs: shellProcesses, Memory: shellMemory}
	if s.cred != nil {
		if err := os.Chown(tmp, s.cred.uid, s.cred.gid); err != nil {
			return "", fmt.Errorf("shell: the command could not run: %v", err)
		}
		spec.UID, spec.GID, spec.Groups = s.cred.uid, s.cred.gid, s.cred.groups
	}
	if s.restricted() && s.launcher {
		spec.Interp, spec.ExecFiles, spec.ExecDirs = true, s.execFiles, s.execDirs
		spec.Names = append(slices.Clone(s.Allow), s.Trust...)
	}
	env := shellEnv(s.lookup, s.env, s.Dir, tmp, s.restricted())
	var note string
	if in.Skill != "" {
		if s.Skills == nil {
			return "", fmt.Errorf("shell refused: this worker runs no skill scripts")
		}
		dir, release, err := s.Skills.Acquire(ctx, in.Skill, user)
		if err != nil {
			return "", fmt.Errorf("shell refused: skill %q: %v", in.Skill, err)
		}
		defer release()
		spec.Read = []string{dir}
		env = append(env, "SKILL_DIR="+dir)
		note = fmt.Sprintf("Skill %s's files are in %s ($SKILL_DIR).\n", in.Skill, dir)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout, stderr := &capped{max: MaxStreamChars}, &capped{max: MaxStreamChars}
	state, err := s.exec(rctx, spec, env, stdout, stderr)
	out := note + fmt.Sprintf("Exit code: %d\nstdout:\n%s\nstderr:\n%s", state.ExitCode(), stdout.text(), stderr.text())
	_, exited := errors.AsType[*exec.ExitError](err)
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return "", fmt.Errorf("shell: the command timed out after %v and was stopped; output so far:\n%s", timeout, out)
	case ctx.Err() != nil:
		return "", ctx.Err()
	case err == nil, exited:
		return out, nil
	default:
		return "", fmt.Errorf("shell: the command could not run: %v", err)
	}
}

// exec runs spec: through the sandbox launcher when this binary has the
// hook, else /bin/sh directly in its own process group (as spec's user).
func (s *Shell) exec(ctx context.Context, spec sandboxSpec, env []string, stdout, stderr io.Writer) (*os.ProcessState, error) {
	start := directCommand
	if s.launcher {
		start = launcherCommand
	}
	cmd, after := start(ctx, spec)
	cmd.Dir, cmd.Env = spec.Dir, env
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, nil
	cmd.WaitDelay = 5 * time.Second
	err := runLocked(cmd)
	after()
	return cmd.ProcessState, err
}

// directCommand returns /bin/sh -c spec's command in its own process
// group, and what to do once it has ended: kill what is left of the group.
func directCommand(ctx context.Context, spec sandboxSpec) (*exec.Cmd, func()) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", spec.Command)
	direct(cmd, spec)
	return cmd, func() { killGroup(cmd) }
}

// capped keeps the first max characters written to it and counts the rest.
type capped struct {
	max     int
	mu      sync.Mutex
	buf     bytes.Buffer
	chars   int
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Keep what room is left, in characters (a rune split across writes
	// counts once per part; close enough for a cut).
	i, k := 0, 0
	for ; k < c.max-c.chars && i < len(p); k++ {
		_, size := utf8.DecodeRune(p[i:])
		i += size
	}
	c.buf.Write(p[:i])
	c.chars += k
	c.dropped += utf8.RuneCount(p[i:])
	return len(p), nil
}

func (c *capped) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimRight(c.buf.String(), "\n")
	if c.dropped > 0 {
		s += fmt.Sprintf("\n[output cut after %d characters; %d more not shown]", c.max, c.dropped)
	}
	return s
}

// SkillsMaterializer puts cat's skills, for the shell of cfg, in a fresh
// private directory under parent (the user cache directory when ""), or,
// when the shell runs as another user, in a directory of the system temp
// directory that only that user's group may enter (skills.PrivateDir).
func SkillsMaterializer(cat *skills.Catalogue, parent, prefix string, cfg Config) (*skills.Materializer, error) {
	c, err := shellCredential(cfg)
	if err != nil {
		return nil, err
	}
	gid := -1
	if c != nil && c.uid != os.Geteuid() {
		gid = c.gid
	}
	dir, err := skills.PrivateDir(parent, prefix, gid)
	if err != nil {
		return nil, err
	}
	return skills.NewMaterializer(cat, dir)
}

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

// gitHardening is configuration git reads from the environment with
// command-line precedence (GIT_CONFIG_COUNT), over any repository config the
// agent may write: no hooks, helpers, pagers, editors, proxies, ext:: or
// local transports, nor implicit bare repositories. Set with an allow-list.
var gitHardening = [][2]string{
	{"core.hooksPath", "/dev/null"}, {"core.fsmonitor", "false"}, {"core.pager", "cat"}, {"core.editor", "false"},
	{"sequence.editor", "false"}, {"core.sshCommand", "ssh"}, {"core.gitProxy", ""}, {"core.askPass", ""},
	{"credential.helper", ""}, {"diff.external", ""}, {"gpg.program", "gpg"}, {"gpg.ssh.program", "ssh-keygen"},
	{"core.attributesFile", "/dev/null"}, {"commit.gpgSign", "false"}, {"tag.gpgSign", "false"}, {"gpg.format", "openpgp"},
	{"gpg.openpgp.program", "gpg"}, {"gpg.x509.program", "gpgsm"}, {"gpg.ssh.defaultKeyCommand", ""}, {"submodule.recurse", "false"},
	{"protocol.allow", "never"}, {"protocol.https.allow", "always"}, {"protocol.http.allow", "always"},
	{"protocol.ssh.allow", "always"}, {"protocol.git.allow", "always"}, {"protocol.ext.allow", "never"},
	// Local transports run remote.<name>.uploadpack on this machine.
	{"protocol.file.allow", "never"}, {"safe.bareRepository", "explicit"},
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
		// No system or global config (HOME is the base directory, which the
		// agent writes), no system attributes.
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

// execList resolves the allow-listed and trusted names on path (a name
// the interpreter runs as a builtin, such as cd or echo, may be missing)
// and adds what the kernel opens to execute them: an ELF program's
// interpreter (the dynamic loader). dirs are directories whose files may all
// be executed: git's exec-path. Landlock grants execute on these only
// (docs/builtin.md, "The kernel runs nothing else").
func execList(ctx context.Context, names []string, path string) (files, dirs []string) {
	add := func(p string) {
		if p != "" && !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	for _, n := range names {
		p := lookPath(n, path)
		if p == "" {
			continue
		}
		add(p)
		add(interpreter(p))
		if filepath.Base(n) == "git" {
			if d := gitExecPath(ctx, p); d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	return files, dirs
}

// lookPath finds name on the colon-separated path; an absolute name is
// taken as it is. "" when there is no such executable file.
func lookPath(name, path string) string {
	if filepath.IsAbs(name) {
		if isExecutable(name) {
			return name
		}
		return ""
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// interpreter returns what the kernel opens to execute the ELF program
// p: its interpreter (the dynamic loader). A script's #! interpreter is
// not added: a shell there would let every listed program's
// configuration start any command through it; the operator lists the
// interpreter (with --shell-trust) if a script must run.
func interpreter(p string) string {
	f, err := elf.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}

// gitExecPath asks git where its helper programs live (remote helpers
// for https, git's own subcommands); "" if it does not say within 10 s
// or before ctx ends.
func gitExecPath(ctx context.Context, git string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, git, "--exec-path")
	cmd.Env = []string{"PATH=" + DefaultShellPath, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	d := strings.TrimSpace(string(out))
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() || !filepath.IsAbs(d) {
		return ""
	}
	return d
}

// Argv[0] markers of the sandbox launcher's two stages on Linux: a child
// subreaper, then the command's exec (docs/builtin.md, "The sandbox").
const (
	launcherArg0 = "toolbus-sandbox"
	execArg0     = "toolbus-sandbox-exec"
)

// sandboxSpec is what the router tells the launcher, as JSON in argv[1].
type sandboxSpec struct {
	Command  string   `json:"command"`
	Dir      string   `json:"dir"`            // the base directory: read, write, execute
	Tmp      string   `json:"tmp"`            // the call's TMPDIR: read, write
	Read     []string `json:"read,omitempty"` // read and execute (system directories, the skill's)
	Landlock bool     `json:"landlock"`
	// Interp runs the command with the in-process interpreter instead of
	// /bin/sh, and (with Landlock) grants the execute right only on
	// ExecFiles and ExecDirs; Names are the command names it lets run.
	Interp    bool     `json:"interp,omitempty"`
	ExecFiles []string `json:"exec_files,omitempty"`
	ExecDirs  []string `json:"exec_dirs,omitempty"`
	Names     []string `json:"names,omitempty"`
	UID       int      `json:"uid"` // -1: keep the router's
	GID       int      `json:"gid"`
	Groups    []int    `json:"groups,omitempty"`
	// Procs bounds the processes (and threads) of the user UID names
	// (RLIMIT_NPROC), or for the router's own user how many more it may
	// have than when the command starts (boundProcs); 0, none.
	Procs int `json:"procs,omitempty"`
	// Memory bounds each process's data (RLIMIT_DATA: its heap and private
	// writable mappings, in bytes); 0, none.
	Memory uint64 `json:"memory,omitempty"`
}

// shellProcesses is Procs: a fork bomb stops there, far below the
// machine's bound, and far above what builds and tests start.
var shellProcesses = 4096

// shellMemory is Memory: a process growing without end (`sed -n p
// /dev/zero` takes 280 MB a second) fails there, above what a compiler
// or a test run takes; reserved address space does not count.
var shellMemory uint64 = 4 << 30

// hooked is set once RunSandboxChild has run in this process, which is how
// the shell knows that re-executing the binary reaches the launcher.
var hooked atomic.Bool

// RunSandboxChild must be the first thing main (and a test binary's
// TestMain) calls in a program that serves the shell tool: in a sandbox
// launcher process it runs the launcher and never returns. Without it the
// shell runs commands without kernel sandbox or subreaper (and logs so).
func RunSandboxChild() {
	runSandboxChild()
	hooked.Store(true)
}

// systemReadDirs are the directories a sandboxed command may read and
// execute from, besides the base directory and the skill's.
var systemReadDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
