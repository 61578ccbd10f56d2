package shellcmd

import (
	"path/filepath"
	"slices"
	"strings"
)

// Protected names, compared case-insensitively: files by base name that a
// shell, git or another tool reads as configuration that can run programs
// or holds credentials, and directories anywhere in a path. The
// permission package parks a write_file call on them (a safety ask), and
// an allow-listed shell writes none of them.
var (
	protectedFiles = []string{".env", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc",
		".zshenv", ".zprofile", ".zlogin", ".kshrc", ".profile", ".gitconfig", ".gitmodules", ".netrc",
		".npmrc", ".pypirc", ".curlrc", ".wgetrc", ".mcp.json", ".envrc"}
	// .claude: an agent host's settings there name hook commands it runs.
	protectedDirs = []string{".git", ".ssh", ".vscode", ".idea", ".aws", ".gnupg", ".claude"}
)

// Protected reports whether p names a protected file (by base name, also
// .env.*) or lies in a protected directory, and returns the name that
// makes it so. p is taken as written: resolve symlinks first to judge the
// file a write reaches.
func Protected(p string) (string, bool) {
	segs := strings.Split(filepath.ToSlash(p), "/")
	for _, s := range segs {
		if slices.Contains(protectedDirs, strings.ToLower(s)) {
			return s, true
		}
	}
	last := segs[len(segs)-1]
	base := strings.ToLower(last)
	if slices.Contains(protectedFiles, base) || strings.HasPrefix(base, ".env.") {
		return last, true
	}
	return "", false
}

// ProtectedArg is Protected for any word of a writing program's command
// line: the word itself, the value after "=" of a long option, and every
// tail of a short-option cluster (so that "-t.git/" is caught whichever
// letter takes the attached value).
func ProtectedArg(a string) (string, bool) {
	if n, ok := Protected(a); ok {
		return n, true
	}
	if v, ok := strings.CutPrefix(a, "--"); ok {
		if _, val, ok := strings.Cut(v, "="); ok {
			return Protected(val)
		}
		return "", false
	}
	if strings.HasPrefix(a, "-") {
		for i := 1; i < len(a); i++ {
			if n, ok := Protected(a[i:]); ok {
				return n, true
			}
		}
	}
	return "", false
}
