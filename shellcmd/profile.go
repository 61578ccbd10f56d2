package shellcmd

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Profile is what toolbus knows of a program's command line: which
// options run other programs or write files in ways a check cannot follow
// (refused), and which arguments name the files it writes.
type Profile struct {
	// Plain says that the program's arguments must be written out
	// plainly (no expansion, no glob): its options decide what it runs or
	// writes. Programs that only read need not.
	Plain bool
	// Check returns the files args (the plain arguments after the
	// program's name) make the program write, or an error saying which
	// option is refused and why.
	Check func(args []string) ([]Write, error)
}

// none is the Check of a program that writes nothing but its output.
func none([]string) ([]Write, error) { return nil, nil }

// Lookup returns the profile of the program with base name name.
func Lookup(name string) (Profile, bool) {
	p, ok := profiles[name]
	return p, ok
}

// readers write nothing but their standard output and run nothing.
var readers = []string{
	"[", "b2sum", "base32", "base64", "basename", "cat", "cksum", "cmp", "column", "comm", "cut",
	"df", "diff", "dirname", "du", "echo", "expr", "false", "fold", "grep", "head", "id", "jq", "ls", "md5sum", "nl", "nproc", "od", "paste", "printenv", "pwd",
	"readlink", "realpath", "rev", "seq", "sha1sum", "sha256sum", "sha512sum", "sleep", "stat",
	"strings", "tac", "tail", "test", "tr", "true", "uname", "wc", "whoami",
}

// allOperands writers: every argument may name a file they create,
// change, move, link or remove.
var allOperands = []string{
	"bunzip2", "bzip2", "chgrp", "chmod", "chown", "cp", "gzip", "install", "link", "ln",
	"mkdir", "mktemp", "mv", "rm", "rmdir", "shred", "split", "tee", "touch", "truncate", "unlink", "unxz", "xz",
}

var profiles = func() map[string]Profile {
	m := map[string]Profile{}
	for _, r := range readers {
		m[r] = Profile{Check: none}
	}
	for _, w := range allOperands {
		m[w] = Profile{Plain: true, Check: derived(w, everyArg(w))}
	}
	// split --filter runs $SHELL -c COMMAND; install --strip-program runs
	// PROG on each file (issue 26, held-out attack).
	m["split"] = Profile{Plain: true, Check: refuseLong("split", "--filter", "", m["split"].Check)}
	m["install"] = Profile{Plain: true, Check: refuseLong("install", "--strip-program", "--strip", m["install"].Check)}
	// cd and pushd move where relative writes land: their directory is
	// checked like a write, so it must be plain (a for loop's variable
	// could otherwise hold .git).
	for _, d := range []string{"cd", "pushd"} {
		m[d] = Profile{Plain: true, Check: everyArg(d)}
	}
	m["popd"] = Profile{Check: none}
	m["printf"] = Profile{Check: checkPrintf}
	m["date"] = Profile{Check: refuseOpt("date", "dfrsI", []string{"--date", "--file", "--reference", "--set", "--iso-8601", "--rfc-3339"}, "-s", "--set", "sets the system clock")}
	m["file"] = Profile{Plain: true, Check: refuseOpt("file", "efFmP", []string{"--exclude", "--exclude-quiet", "--separator", "--magic-file", "--files-from", "--parameter"},
		"-C", "--compile", "writes a compiled magic file")}
	m["sed"] = Profile{Plain: true, Check: checkSed}
	m["tar"] = Profile{Plain: true, Check: checkTar}
	m["find"] = Profile{Plain: true, Check: checkFind}
	m["sort"] = Profile{Plain: true, Check: checkSort}
	m["uniq"] = Profile{Plain: true, Check: secondOperand("uniq", "fsw", nil)}
	m["xxd"] = Profile{Plain: true, Check: secondOperand("xxd", "cglsoCn", nil)}
	m["dd"] = Profile{Plain: true, Check: checkDD}
	m["git"] = Profile{Plain: true, Check: checkGit}
	return m
}()

// everyArg counts every argument but "--" as a file written, and for
// options also what follows "=" or the letter (-t DIR, --target-directory=DIR).
func everyArg(prog string) func([]string) ([]Write, error) {
	return func(args []string) ([]Write, error) {
		var out []Write
		for _, a := range args {
			switch {
			case a == "--" || a == "-":
			case strings.HasPrefix(a, "--"):
				if _, v, ok := strings.Cut(a, "="); ok && v != "" {
					out = append(out, Write{Path: v, By: prog})
				}
			case strings.HasPrefix(a, "-"):
				// A value attached to a short option: -t.git/ -S.bak.
				if len(a) > 2 {
					out = append(out, Write{Path: a[2:], By: prog})
				}
			default:
				out = append(out, Write{Path: a, By: prog})
			}
		}
		return out, nil
	}
}

// refuseLong refuses the long option full (or an abbreviation of it
// longer than exact, an option of its own) before check runs.
func refuseLong(prog, full, exact string, check func([]string) ([]Write, error)) func([]string) ([]Write, error) {
	return func(args []string) ([]Write, error) {
		for _, a := range args {
			if a == "--" {
				break
			}
			name, _, _ := strings.Cut(a, "=")
			if isLong(name, full) && len(name) > len(exact) && strings.HasPrefix(name, "--") {
				return nil, fmt.Errorf("%s %s runs a program of the caller's choosing", prog, name)
			}
		}
		return check(args)
	}
}

// compressors name their output after the input: gzip -d .bashrc.gz
// writes .bashrc.
var compressors = []string{"bunzip2", "bzip2", "gzip", "unxz", "xz"}

// derived adds the names a writer makes from its operands (issue 26): a
// compressor's -S suffix added or stripped, or its default extension
// stripped, and cp, mv, ln and install backups (mv -b -S rc x .bash writes
// .bashrc). Each is checked as a write.
func derived(prog string, check func([]string) ([]Write, error)) func([]string) ([]Write, error) {
	return func(args []string) ([]Write, error) {
		out, err := check(args)
		if err != nil {
			return nil, err
		}
		sufs := suffixValues(args)
		strip := slices.Contains(compressors, prog)
		n := len(out)
		for _, w := range out[:n] {
			for _, s := range sufs {
				out = append(out, Write{Path: w.Path + s, By: prog + " (suffix " + s + ")"})
				if t, ok := strings.CutSuffix(w.Path, s); ok && t != "" {
					out = append(out, Write{Path: t, By: prog + " (suffix " + s + ")"})
				}
			}
			if base := filepath.Base(w.Path); strip && strings.LastIndexByte(base, '.') > 0 {
				out = append(out, Write{Path: w.Path[:len(w.Path)-len(base)+strings.LastIndexByte(base, '.')], By: prog + " (its output)"})
			}
		}
		return out, nil
	}
}

// gzipSuffixes are the suffixes gzip -d takes off besides the one after
// the last dot (which derived strips).
var gzipSuffixes = []string{"-gz", "-z", "_z"}

// GzipHidden returns the names gzip -d writes that no word holds and the
// profile does not derive (".bashrc-gz" gives .bashrc), and refuses
// -N/--name, which restores any name from the archive's header.
func GzipHidden(args []string) ([]Write, error) {
	opts, ops := getopt(args, "S", nil)
	for _, o := range opts {
		if o.name == "-N" || len(o.name) > 3 && isLong(o.name, "--name") {
			return nil, fmt.Errorf("with an allow-list gzip %s is refused: it names the output from the archive's header, which the check cannot see", o.name)
		}
	}
	var out []Write
	for _, v := range ops {
		for _, suf := range gzipSuffixes {
			if len(v) > len(suf) && strings.HasSuffix(strings.ToLower(v), suf) {
				out = append(out, Write{Path: v[:len(v)-len(suf)], By: "gzip -d (its output)"})
			}
		}
	}
	return out, nil
}

// suffixValues are the values of -S and --suffix in args, as getopt
// reads them; an empty one adds no name.
func suffixValues(args []string) []string {
	opts, _ := getopt(args, "S", []string{"--suffix"})
	var out []string
	for _, o := range opts {
		if o.value != "" && (o.name == "-S" || isLong(o.name, "--suffix")) {
			out = append(out, o.value)
		}
	}
	return out
}

// getopt splits args into options and operands the way GNU getopt_long
// does (options anywhere, "--" ends them): short lists the letters that
// take a value (a letter followed by '?' takes one only when attached, as
// sed's -i[SUFFIX]), long the long options that do (a unique prefix of one
// counts as it, as GNU accepts abbreviations).
type option struct {
	name  string // "-x" or "--long" as written (before "=")
	value string
}

func getopt(args []string, short string, long []string) (opts []option, operands []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(operands, args[i+1:]...)
		case strings.HasPrefix(a, "--"):
			name, val, has := strings.Cut(a, "=")
			if !has && takesValue(name, long) && i+1 < len(args) {
				i++
				val = args[i]
			}
			opts = append(opts, option{name: name, value: val})
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				c := a[j]
				k := strings.IndexByte(short, c)
				if k < 0 || c == '?' {
					opts = append(opts, option{name: "-" + string(c)})
					continue
				}
				val := a[j+1:]
				if optional := k+1 < len(short) && short[k+1] == '?'; val == "" && !optional && i+1 < len(args) {
					i++
					val = args[i]
				}
				opts = append(opts, option{name: "-" + string(c), value: val})
				break
			}
		default:
			operands = append(operands, a)
		}
	}
	return opts, operands
}

// takesValue reports whether the long option name (or an abbreviation of
// one) is in long.
func takesValue(name string, long []string) bool {
	return slices.ContainsFunc(long, func(l string) bool { return isLong(name, l) })
}

// isLong reports whether name is the long option full or an abbreviation
// of it (at least one letter after "--").
func isLong(name, full string) bool {
	return len(name) > 2 && strings.HasPrefix(full, name)
}

func checkPrintf(args []string) ([]Write, error) {
	if len(args) > 0 && strings.HasPrefix(args[0], "-v") {
		return nil, fmt.Errorf("printf -v sets a variable, which would reach the programs the command starts")
	}
	return nil, nil
}

func checkFind(args []string) ([]Write, error) {
	for _, a := range args {
		switch a {
		case "-exec", "-execdir", "-ok", "-okdir":
			return nil, fmt.Errorf("find %s runs other programs", a)
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			return nil, fmt.Errorf("find %s writes a file of the caller's choosing", a)
		}
	}
	return nil, nil
}

func checkSort(args []string) ([]Write, error) {
	opts, _ := getopt(args, "oTSktg", []string{"--output", "--temporary-directory", "--buffer-size", "--key",
		"--field-separator", "--files0-from", "--random-source", "--batch-size", "--parallel", "--sort", "--compress-program"})
	var out []Write
	for _, o := range opts {
		switch {
		case isLong(o.name, "--compress-program"):
			return nil, fmt.Errorf("sort --compress-program runs a program of the caller's choosing")
		case o.name == "-o" || isLong(o.name, "--output"), o.name == "-T" || isLong(o.name, "--temporary-directory"):
			out = append(out, Write{Path: o.value, By: "sort " + o.name})
		}
	}
	return out, nil
}

// secondOperand is for programs whose second operand is their output
// file (uniq IN OUT, xxd IN OUT).
func secondOperand(prog, short string, long []string) func([]string) ([]Write, error) {
	return func(args []string) ([]Write, error) {
		_, ops := getopt(args, short, long)
		if len(ops) >= 2 {
			return []Write{{Path: ops[1], By: prog}}, nil
		}
		return nil, nil
	}
}

func checkDD(args []string) ([]Write, error) {
	var out []Write
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "of="); ok {
			out = append(out, Write{Path: v, By: "dd of="})
		}
	}
	return out, nil
}

// refuseOpt refuses the option -letter or --full (or an abbreviation of
// it) of a program whose options getopt reads with short and long.
func refuseOpt(prog, short string, long []string, letter, full, why string) func([]string) ([]Write, error) {
	return func(args []string) ([]Write, error) {
		opts, _ := getopt(args, short, long)
		for _, o := range opts {
			if o.name == letter || isLong(o.name, full) {
				return nil, fmt.Errorf("%s %s %s", prog, o.name, why)
			}
		}
		return nil, nil
	}
}

// gitPathWriters are the git subcommands whose operands name files or
// directories they write.
var gitPathWriters = []string{"checkout", "checkout-index", "clone", "init", "mv", "restore", "worktree"}

// checkGit returns the files git's arguments name for writing (the operands
// of the subcommands above, --output, -o, --output-directory, --prefix);
// what git writes from a repository's content cannot be seen.
func checkGit(args []string) ([]Write, error) {
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		opt, _, has := strings.Cut(args[i], "=")
		if !has && slices.Contains([]string{"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--attr-source"}, opt) {
			i++
		}
	}
	if i >= len(args) {
		return nil, nil
	}
	sub, rest := args[i], args[i+1:]
	var out []Write
	operands := slices.Contains(gitPathWriters, sub)
	dashes := false
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if dashes || !strings.HasPrefix(a, "-") {
			if operands {
				out = append(out, Write{Path: a, By: "git " + sub})
			}
			continue
		}
		if a == "--" {
			dashes = true
			continue
		}
		name, val, has := strings.Cut(a, "=")
		valued := isLong(name, "--output") || isLong(name, "--output-directory") || isLong(name, "--prefix") ||
			(name == "-o" && (sub == "format-patch" || sub == "archive"))
		if !valued {
			continue
		}
		if !has {
			if j+1 >= len(rest) {
				continue
			}
			j++
			val = rest[j]
		}
		out = append(out, Write{Path: val, By: "git " + sub + " " + name})
	}
	return out, nil
}

// tar's letters that take a value (GNU tar), in old style (tar cf x) and
// short options.
const tarValued = "fgCTXIFKNLbHV"

// tarRefused are GNU tar's long options that run programs, and extraction,
// which writes whatever names the archive holds (.git/config among them).
var tarRefused = []struct{ name, why string }{
	{"--use-compress-program", "runs a program of the caller's choosing"},
	{"--to-command", "runs a program of the caller's choosing"},
	{"--checkpoint-action", "can run a program of the caller's choosing"},
	{"--info-script", "runs a program of the caller's choosing"},
	{"--new-volume-script", "runs a program of the caller's choosing"},
	{"--rsh-command", "runs a program of the caller's choosing"},
	{"--rmt-command", "runs a program of the caller's choosing"},
	{"--extract", "writes whatever file names the archive holds, which the check cannot see; with an allow-list tar may create, list and compare"},
	{"--get", "writes whatever file names the archive holds, which the check cannot see; with an allow-list tar may create, list and compare"},
}

// tarWriting are the long options whose value is a file tar writes.
var tarWriting = []string{"--file", "--listed-incremental", "--index-file", "--volno-file", "--directory"}

// tarLongValued are GNU tar's long options that take a separate value.
var tarLongValued = []string{"--file", "--listed-incremental", "--index-file", "--volno-file", "--directory",
	"--files-from", "--exclude-from", "--starting-file", "--newer", "--after-date", "--newer-mtime", "--tape-length",
	"--blocking-factor", "--format", "--label", "--owner", "--group", "--mode", "--mtime", "--transform", "--xform",
	"--exclude", "--record-size", "--strip-components", "--use-compress-program", "--to-command",
	"--checkpoint-action", "--info-script", "--new-volume-script", "--rsh-command", "--rmt-command", "--suffix"}

// checkTar refuses tar's options that run programs (-I, -F, --to-command,
// --checkpoint-action=exec ...), extraction (-x), and a remote archive
// (host:file runs rsh); the archive (-f), the incremental snapshot (-g)
// and -C are files or places it writes.
func checkTar(args []string) ([]Write, error) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		// Old style: "tar czf out.tgz dir": letters first, their values
		// follow in order.
		old := args[0]
		rest := args[1:]
		var conv []string
		for i := 0; i < len(old); i++ {
			c := old[i]
			if strings.IndexByte(tarValued, c) >= 0 && len(rest) > 0 {
				conv = append(conv, "-"+string(c), rest[0])
				rest = rest[1:]
				continue
			}
			conv = append(conv, "-"+string(c))
		}
		args = append(conv, rest...)
	}
	// Whatever takes it as a value, a long option that runs a program or
	// extracts is refused.
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		for _, r := range tarRefused {
			if strings.HasPrefix(a, "--") && isLong(name, r.name) {
				return nil, fmt.Errorf("tar %s %s", name, r.why)
			}
		}
	}
	opts, _ := getopt(args, tarValued, tarLongValued)
	force := slices.ContainsFunc(opts, func(o option) bool { return isLong(o.name, "--force-local") })
	var out []Write
	for _, o := range opts {
		switch {
		case o.name == "-I" || o.name == "-F":
			return nil, fmt.Errorf("tar %s runs a program of the caller's choosing", o.name)
		case o.name == "-x":
			return nil, fmt.Errorf("tar -x writes whatever file names the archive holds, which the check cannot see; with an allow-list tar may create, list and compare")
		case o.value == "-" || !slices.Contains([]string{"-f", "-g", "-C"}, o.name) && !slices.ContainsFunc(tarWriting, func(w string) bool { return isLong(o.name, w) }):
			continue
		case (o.name == "-f" || isLong(o.name, "--file")) && !force && strings.Contains(o.value, ":"):
			return nil, fmt.Errorf("tar %s %s names a remote archive, which runs rsh (add --force-local for a local file)", o.name, o.value)
		}
		out = append(out, Write{Path: o.value, By: "tar " + o.name})
	}
	// A cluster holding x, I or F is refused whatever takes it as a value
	// (an old-style "tar 0C -x" reads -x as C's directory; an error of this
	// reading must not let extraction through).
	for i, a := range args {
		if (i == 0 || strings.HasPrefix(a, "-")) && !strings.HasPrefix(a, "--") && strings.ContainsAny(a, "xIF") {
			return nil, fmt.Errorf("tar %s: -x writes whatever file names the archive holds, -I and -F run a program of the caller's choosing; with an allow-list tar may create, list and compare", a)
		}
	}
	return out, nil
}
