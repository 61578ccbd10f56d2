package shellcmd

import (
	"fmt"
	"slices"
	"strings"
)

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
