package security

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/private"
)

// SpecFile is the Spec a directory written by Generate was made from, so
// AddAgent can add users to it later.
const SpecFile = "spec.json"

// Agent is what AddAgent made or found: the session's agent user and its
// files.
type Agent struct {
	User    User
	Seed    string // the nkey seed file
	Env     string // the .env file to source
	Created bool   // false when the user existed already (and may have been bound now)
}

// AddAgent adds agent user session-<session> to dir (Generate's), bound to
// user when not empty: a fresh seed and .env, and the configuration
// rewritten by renames, users.json last (routers poll it); the shared agent
// gets the session's deny entries. An existing user keeps its key and may
// be bound, or rebound, but not unbound.
func AddAgent(dir, session, user string) (Agent, error) {
	unlock, err := lock(dir)
	if err != nil {
		return Agent{}, err
	}
	defer unlock()
	spec, err := LoadSpec(dir)
	if err != nil {
		return Agent{}, err
	}
	created := !slices.Contains(spec.Sessions, session)
	if created {
		spec.Sessions = append(spec.Sessions, session)
	}
	if user != "" {
		spec.bind(session, user)
	}
	users, err := Users(spec)
	if err != nil {
		return Agent{}, err
	}
	if err := write(dir, envURL(dir), spec, users); err != nil {
		return Agent{}, err
	}
	u, _ := Lookup(users, "session-"+session)
	return Agent{User: u, Seed: SeedFile(dir, u.Name), Env: EnvFile(dir, u.Name), Created: created}, nil
}

// lockFile serialises the changes of a directory's configuration: each
// reads the spec, changes it and writes every file back, so two at once
// (two `toolbus security agent`, or one and a router's Refresh) lost one's
// sessions, and the shared agent their deny entries (session 39,
// TestAttackAgentsAddedAtOnce).
const lockFile = ".security.lock"

// lock takes dir's lock, waiting for its holder.
func lock(dir string) (unlock func(), err error) {
	f, err := private.Lock(filepath.Join(dir, lockFile), false)
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	return func() { f.Close() }, nil
}

// LoadSpec reads the Spec of dir: its spec.json, or for a directory
// written before there was one, the spec users.json implies.
func LoadSpec(dir string) (Spec, error) {
	spec, err := readJSON[Spec](filepath.Join(dir, SpecFile))
	if !errors.Is(err, os.ErrNotExist) {
		return spec, err
	}
	users, err := readJSON[[]User](filepath.Join(dir, UsersFile))
	return specOf(users), err
}

// bind binds session to user.
func (spec *Spec) bind(session, user string) {
	if spec.Bind == nil {
		spec.Bind = map[string]string{}
	}
	spec.Bind[session] = user
}

// specOf rebuilds the Spec users were made from.
func specOf(users []User) Spec {
	var spec Spec
	for _, u := range users {
		switch u.Role {
		case RoleRouter:
			if len(u.Permissions.Publish) > 0 {
				spec.Prefix = strings.TrimSuffix(u.Permissions.Publish[0], ".>")
			}
		case RoleWorker:
			if u.Name != RoleWorker {
				spec.Workers = append(spec.Workers, Handler{Name: strings.TrimPrefix(u.Name, RoleWorker+"-"), Tools: u.Tools})
				continue
			}
			spec.WorkerTools = u.Tools
			groupPrefix := bus.NewSubjects(spec.Prefix).Workers.RegisterGroup("")
			for _, p := range u.Permissions.Publish {
				if g, ok := strings.CutPrefix(p, groupPrefix); ok && g != "*" && len(u.Tools) > 0 {
					spec.WorkerGroups = append(spec.WorkerGroups, g)
				}
			}
		case RoleApprover:
			spec.ApproverTools = u.Tools
		case RoleHandler:
			spec.Handlers = append(spec.Handlers, Handler{Name: strings.TrimPrefix(u.Name, "handler-"), Tools: u.Tools})
		case RoleSession:
			spec.Sessions = append(spec.Sessions, u.Session)
			if u.User != "" {
				spec.bind(u.Session, u.User)
			}
		case RoleAgent:
			answer := spec.Prefix + ".answer."
			for _, p := range u.Permissions.Publish {
				if t, ok := strings.CutPrefix(p, answer); ok {
					spec.AgentAnswers = append(spec.AgentAnswers, t)
				}
			}
		}
	}
	return spec
}

// readJSON decodes the JSON file path; the zero value on an error.
func readJSON[T any](path string) (T, error) {
	var v, zero T
	b, err := os.ReadFile(path)
	if err != nil {
		return zero, fmt.Errorf("security: %w", err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return zero, fmt.Errorf("security: %s: %w", path, err)
	}
	return v, nil
}

// envURL is the NATS_URL the directory's .env files name, if any.
func envURL(dir string) string {
	for _, name := range []string{RoleRouter, RoleAgent} {
		b, _ := os.ReadFile(EnvFile(dir, name))
		for line := range strings.Lines(string(b)) {
			if name, value, ok := parseEnvLine(line); ok && name == "NATS_URL" {
				return value
			}
		}
	}
	return ""
}

// write writes users into dir: a seed and .env for each user without a key
// (keys), then nats-server.conf, spec.json and users.json by rename.
func write(dir, url string, spec Spec, users []User) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("security: %w", err)
	}
	creds, err := keys(dir, users, func(u User) (string, error) { return newSeed(dir, abs, url, u) })
	if err != nil {
		return err
	}
	sb, _ := json.MarshalIndent(spec, "", "  ")
	for _, f := range []struct {
		name string
		data []byte
	}{
		{ServerConfigFile, []byte(ServerConfig(spec.Prefix, users, creds))},
		{SpecFile, append(sb, '\n')},
		{UsersFile, []byte(JSON(users))},
	} {
		if _, err := private.WriteFile(filepath.Join(dir, f.name), bytes.NewReader(f.data)); err != nil {
			return fmt.Errorf("security: %w", err)
		}
	}
	return nil
}

// keys is each user's public key: its seed's in dir, else the one dir's
// nats-server.conf gives it (a seed moved to the host that runs the role),
// else fresh's (nil: an error).
func keys(dir string, users []User, fresh func(User) (string, error)) (map[string]Credential, error) {
	conf, _ := os.ReadFile(filepath.Join(dir, ServerConfigFile))
	kept := confKeys(string(conf))
	creds := map[string]Credential{}
	for _, u := range users {
		pub, err := publicKey(SeedFile(dir, u.Name))
		if errors.Is(err, os.ErrNotExist) && kept[u.Name] != "" {
			pub, err = kept[u.Name], nil
		} else if errors.Is(err, os.ErrNotExist) && fresh != nil {
			pub, err = fresh(u)
		}
		if err != nil {
			return nil, err
		}
		creds[u.Name] = Credential{NKey: pub}
	}
	return creds, nil
}

// confKeys are the nkeys by user of a nats-server.conf that ServerConfig
// wrote, of this version or an older one: a user's comment line, then its
// nkey.
func confKeys(conf string) map[string]string {
	kept, name := map[string]string{}, ""
	for line := range strings.Lines(conf) {
		line = strings.TrimSpace(line)
		if c, ok := strings.CutPrefix(line, "# "); ok {
			name, _, _ = strings.Cut(c, " (role ")
		} else if k, ok := strings.CutPrefix(line, `{nkey: "`); ok && name != "" {
			kept[name], _, _ = strings.Cut(k, `"`)
		}
	}
	return kept
}

// publicKey is the public key of the nkey seed in file.
func publicKey(file string) (string, error) {
	seed, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return "", fmt.Errorf("security: %s: %w", file, err)
	}
	return kp.PublicKey()
}

// exportLine is a .env line `export NAME=VALUE` that bash, zsh and fish all
// source and export.
func exportLine(name, value string) string {
	return "export " + name + "=" + envQuote(value) + "\n"
}

// envQuote quotes v for bash, zsh and fish: plain as is, else as shellQuote does.
func envQuote(v string) string {
	plain := v != "" && strings.IndexFunc(v, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:@,+=%", r))
	}) < 0
	if plain {
		return v
	}
	return shellQuote(v)
}

// parseEnvLine reads a line exportLine wrote, or a bare NAME=VALUE line of
// a file written before files exported their variables.
func parseEnvLine(line string) (name, value string, ok bool) {
	line = strings.TrimPrefix(strings.TrimSpace(line), "export ")
	name, value, ok = strings.Cut(line, "=")
	if !ok {
		return "", "", false
	}
	if len(value) >= 2 && value[0] == '\'' {
		value = strings.ReplaceAll(value[1:len(value)-1], `'\''`, "'")
	}
	return name, value, true
}

// newSeed makes u's nkey, its seed file and .env file; abs is dir made
// absolute, for the .env file.
func newSeed(dir, abs, url string, u User) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("security: nkey for %s: %w", u.Name, err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	if _, err := private.WriteFile(SeedFile(dir, u.Name), bytes.NewReader(append(seed, '\n'))); err != nil {
		return "", fmt.Errorf("security: %w", err)
	}
	env := exportLine("NATS_NKEY", SeedFile(abs, u.Name)) + exportLine("NATS_INBOX_PREFIX", u.InboxPrefix)
	if url != "" {
		env = exportLine("NATS_URL", url) + env
	}
	if _, err := private.WriteFile(EnvFile(dir, u.Name), strings.NewReader(env)); err != nil {
		return "", fmt.Errorf("security: %w", err)
	}
	return pub, nil
}

// Bindings is a router's session → user bindings and the sessions with an
// agent user of their own (ParseIdentities). Safe for concurrent use; Load
// replaces them whole.
type Bindings struct {
	mu  sync.RWMutex
	m   map[string]string
	own map[string]bool
}

// LoadBindings reads the bindings of file.
func LoadBindings(file string) (*Bindings, error) {
	b := &Bindings{}
	if err := b.Load(file); err != nil {
		return nil, err
	}
	return b, nil
}

// Load replaces the bindings with those of file; on an error the old ones
// stay.
func (b *Bindings) Load(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("security: identities: %w", err)
	}
	m, own, err := ParseIdentities(data)
	if err != nil {
		return fmt.Errorf("security: identities %s: %w", file, err)
	}
	b.mu.Lock()
	b.m, b.own = m, own
	b.mu.Unlock()
	return nil
}

// ParseIdentities reads a users.json or an identities file ({"sessions":
// {"<session>": "<user>"}, "agents": ["<session>"]}): the bindings and the
// sessions with their own agent user (every session user, or the bound and
// listed sessions).
func ParseIdentities(data []byte) (bind map[string]string, own map[string]bool, err error) {
	data = bytes.TrimSpace(data)
	bind, own = map[string]string{}, map[string]bool{}
	if len(data) > 0 && data[0] == '[' {
		var users []User
		if err := json.Unmarshal(data, &users); err != nil {
			return nil, nil, err
		}
		for _, u := range users {
			if u.Role != RoleSession || u.Session == "" {
				continue
			}
			own[u.Session] = true
			if u.User != "" {
				bind[u.Session] = u.User
			}
		}
		return bind, own, nil
	}
	var f struct {
		Sessions map[string]string `json:"sessions"`
		Agents   []string          `json:"agents"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("want a users.json array or {\"sessions\": {\"<session>\": \"<user>\"}, \"agents\": [\"<session>\"]}: %w", err)
	}
	for s, u := range f.Sessions {
		if s == "" || u == "" {
			return nil, nil, fmt.Errorf("session %q bound to user %q: neither may be empty", s, u)
		}
		bind[s], own[s] = u, true
	}
	for _, s := range f.Agents {
		if !bus.ValidID(s) {
			return nil, nil, fmt.Errorf("agents: %q is not a session id", s)
		}
		own[s] = true
	}
	return bind, own, nil
}

// UserOf returns the user session is bound to.
func (b *Bindings) UserOf(session string) (string, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	u, ok := b.m[session]
	return u, ok
}

// OwnAgent reports whether session has an agent user of its own, bound to
// a user or not (1.13; router.Identities).
func (b *Bindings) OwnAgent(session string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.own[session]
}

// Refresh rewrites dir's configuration from its spec, keeping every key,
// when an older version wrote different users or another nats-server.conf
// (accounts and their links change it alone); a running server must then
// reload. It reports whether it rewrote.
func Refresh(dir string) (bool, error) {
	if _, _, stale, err := stale(dir); err != nil || !stale {
		return false, err // up to date, or made by hand: no file written
	}
	unlock, err := lock(dir)
	if err != nil {
		return false, err
	}
	defer unlock()
	spec, users, stale, err := stale(dir) // as it is now the lock is held
	if err != nil || !stale {
		return false, err
	}
	if err := write(dir, envURL(dir), spec, users); err != nil {
		return false, err
	}
	return true, nil
}

// stale reads dir's spec and reports whether its configuration differs from
// what this version writes for it; a directory without users.json was made
// by hand and is never stale.
func stale(dir string) (Spec, []User, bool, error) {
	old, err := os.ReadFile(filepath.Join(dir, UsersFile))
	if errors.Is(err, os.ErrNotExist) {
		return Spec{}, nil, false, nil
	} else if err != nil {
		return Spec{}, nil, false, fmt.Errorf("security: %w", err)
	}
	spec, err := LoadSpec(dir)
	if err != nil {
		return Spec{}, nil, false, err
	}
	users, err := Users(spec)
	if err != nil {
		return Spec{}, nil, false, err
	}
	conf, err := os.ReadFile(filepath.Join(dir, ServerConfigFile))
	creds, kerr := keys(dir, users, nil)
	return spec, users, string(old) != JSON(users) || err != nil || kerr != nil || string(conf) != ServerConfig(spec.Prefix, users, creds), nil
}
