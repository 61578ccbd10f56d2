package permission

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/shellcmd"
)

// dangerous reports whether the call's path, as written or resolved, is a
// dangerous file or lies in a dangerous directory, and says which.
func (c *call) dangerous() (string, bool) {
	if c.def.RuleMatcher == bus.MatcherCommand && c.ok {
		return c.dangerousWrite()
	}
	if c.def.RuleMatcher != bus.MatcherPath || !c.ok {
		return "", false
	}
	for i, p := range c.paths {
		name, ok := dangerousName(p)
		if !ok {
			continue
		}
		if i == 0 {
			return fmt.Sprintf("writes to a dangerous path %s (%s)", name, p), true
		}
		return fmt.Sprintf("writes to a dangerous path %s (%s resolves to %s)", name, c.paths[0], p), true
	}
	return "", false
}

// dangerousWrite is dangerous for a command: one of its writes (a
// redirection, sed -i, cp ...) reaches a dangerous path as write_file
// would, or a computed target's text names one.
func (c *call) dangerousWrite() (string, bool) {
	for _, w := range c.writes {
		if reason, ok := w.dangerous(); ok {
			return fmt.Sprintf("the command (%s) %s", w.by, reason), true
		}
	}
	unquote := strings.NewReplacer(`"`, "", `'`, "", `\`, "")
	for _, raw := range c.unseen {
		for _, f := range strings.Fields(unquote.Replace(raw)) {
			if name, ok := dangerousName(f); ok {
				return fmt.Sprintf("the command writes to a computed path that names the dangerous %s (%s)", name, raw), true
			}
		}
	}
	return "", false
}

// dangerousName is shellcmd.Protected: the same names an allow-listed
// shell refuses to write.
func dangerousName(p string) (string, bool) { return shellcmd.Protected(p) }

// maxLinks bounds the symlinks followed while resolving one path, as the
// kernel does (ELOOP).
const maxLinks = 40

// resolve returns the absolute path p with every symlink on it followed,
// component by component, so that a dangling link (whose target a write
// would create) is followed too and ".." applies to what a link points at.
// Components that do not exist are appended as they are. Results are cached
// per call.
func (c *call) resolve(p string) string {
	if r, ok := c.resolved[p]; ok {
		return r
	}
	r := resolve(p)
	c.resolved[p] = r
	return r
}

func resolve(p string) string {
	sep := string(filepath.Separator)
	vol := filepath.VolumeName(p)
	root := vol + sep
	todo := strings.Split(filepath.ToSlash(p[len(vol):]), "/")
	done := root
	links := 0
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, part)
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		target, err := os.Readlink(next)
		links++
		if err != nil || links > maxLinks {
			return filepath.Join(append([]string{next}, todo...)...)
		}
		if filepath.IsAbs(target) {
			vol = filepath.VolumeName(target)
			done = vol + sep
			target = target[len(vol):]
		}
		todo = append(strings.Split(filepath.ToSlash(target), "/"), todo...)
	}
	return done
}

// patternForms returns the absolute forms of a path pattern: relative ones
// joined to each base, each also with the symlinks of its literal leading
// directories resolved (so that "/tmp/x/**" still matches when /tmp is a
// link).
func (c *call) patternForms(pattern string) []string {
	var abs []string
	if filepath.IsAbs(pattern) {
		abs = []string{filepath.Clean(pattern)}
	} else {
		for _, b := range c.bases {
			abs = append(abs, filepath.Join(b, pattern))
		}
	}
	var out []string
	for _, a := range abs {
		out = append(out, a)
		segs := strings.Split(filepath.ToSlash(a), "/")
		n := slices.IndexFunc(segs, func(s string) bool { return strings.ContainsAny(s, `*?[\`) })
		if n < 0 {
			n = len(segs)
		}
		if n <= 1 {
			continue
		}
		lit := filepath.FromSlash(strings.Join(segs[:n], "/"))
		if r := c.resolve(lit); r != lit {
			f := filepath.ToSlash(r)
			if n < len(segs) {
				f = strings.TrimSuffix(f, "/") + "/" + strings.Join(segs[n:], "/")
			}
			if f = filepath.FromSlash(f); !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// matchPath matches the absolute path name against the absolute pattern:
// segments as path.Match, and a "**" segment for any number of directories.
// A malformed pattern matches nothing.
func matchPath(pattern, name string) bool {
	ps := strings.Split(filepath.ToSlash(pattern), "/")
	ns := strings.Split(filepath.ToSlash(name), "/")
	// m[i][j]: ps[i:] matches ns[j:]; one row at a time, from the end.
	next := make([]bool, len(ns)+1)
	cur := make([]bool, len(ns)+1)
	next[len(ns)] = true
	for i := len(ps) - 1; i >= 0; i-- {
		for j := len(ns); j >= 0; j-- {
			switch {
			case ps[i] == "**":
				cur[j] = next[j] || (j < len(ns) && cur[j+1])
			case j == len(ns):
				cur[j] = false
			default:
				ok, err := path.Match(ps[i], ns[j])
				cur[j] = err == nil && ok && next[j+1]
			}
		}
		next, cur = cur, next
	}
	return next[0]
}

// inside reports whether the real path of the call (resolved through
// symlinks) lies in one of the work dirs (as written or resolved).
func (c *call) inside(workDirs []string) bool {
	if c.def.RuleMatcher != bus.MatcherPath || !c.ok {
		return false
	}
	var dirs []string
	for _, d := range workDirs {
		if d == "" {
			continue
		}
		a, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		dirs = append(dirs, a, c.resolve(a))
	}
	return slices.ContainsFunc(dirs, func(d string) bool { return within(c.real(), d) })
}

func within(p, dir string) bool {
	if p == dir {
		return true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(p, dir)
}
