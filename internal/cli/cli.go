// Package cli holds what the commands share: signal handling and exit, flag
// sets and their usage, and finding the module's other commands; what only
// the long-running commands need is in cli/daemon, so the operator CLI
// links no metrics or tracing exporter.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// Main runs a command's run with a context that ends on SIGINT or SIGTERM,
// and exits 1 when it fails (printing the error, except for -h).
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go abortOnSecondSignal(ctx, name)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return // help was asked for, and printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		var coded interface{ ExitCode() int }
		if errors.As(err, &coded) && coded.ExitCode() > 0 {
			os.Exit(coded.ExitCode()) // a status of its own (toolbus: 3 for calls still parked)
		}
		os.Exit(1)
	}
}

// abortOnSecondSignal exits at once on a second interrupt, once the first
// has cancelled ctx and a drain may be under way.
func abortOnSecondSignal(ctx context.Context, name string) {
	<-ctx.Done()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	<-ch
	fmt.Fprintln(os.Stderr, name+": second signal, exiting without waiting")
	os.Exit(130)
}

// FlagSet returns the flag set of command name for args: its output (usage,
// errors) goes to stderr, or to stdout when args ask for help.
func FlagSet(name string, args []string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if WantsHelp(args) {
		fs.SetOutput(stdout) // help asked for goes to stdout, exit 0
	}
	return fs
}

// WantsHelp reports whether args ask for help (-h, -help or --help before
// any "--"): the help then goes to standard output, and the exit status is 0.
func WantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// GroupedUsage returns a usage function for fs that prints head, then the
// flags that are not in common, then those that are under the heading
// commonTitle, so a command's own flags come first and the shared ones once
// (common nil: every flag under "flags:", as flag's own usage lists them).
func GroupedUsage(fs *flag.FlagSet, head string, common map[string]bool, commonTitle string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprint(w, head)
		own := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shared := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		fs.VisitAll(func(f *flag.Flag) {
			set := own
			if common[f.Name] {
				set = shared
			}
			set.Var(f.Value, f.Name, f.Usage)
			set.Lookup(f.Name).DefValue = f.DefValue
		})
		for _, g := range []struct {
			title string
			set   *flag.FlagSet
		}{{"flags:", own}, {commonTitle, shared}} {
			n := 0
			g.set.VisitAll(func(*flag.Flag) { n++ })
			if n == 0 {
				continue
			}
			fmt.Fprintf(w, "\n%s\n", g.title)
			g.set.SetOutput(w)
			g.set.PrintDefaults()
		}
	}
}

// WriteJSON prints v as indented JSON, as the commands' --json does.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Given reports whether the flag name was set on fs's command line.
func Given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Helpers finds this module's commands names in dir, beside this
// executable, on $PATH, or builds them into tmp inside the module; it
// returns their paths and where they came from.
func Helpers(ctx context.Context, dir, tmp string, logf func(string, ...any), names ...string) (paths []string, from string, err error) {
	// in returns the paths of names in d when every one is an executable there.
	in := func(d string) ([]string, bool) {
		ps := make([]string, len(names))
		for i, n := range names {
			if ps[i] = filepath.Join(d, n); !isExecutable(ps[i]) {
				return nil, false
			}
		}
		return ps, true
	}
	list := strings.Join(names, " and ")
	if dir != "" {
		if ps, ok := in(dir); ok {
			return ps, "--bin " + dir, nil
		}
		return nil, "", fmt.Errorf("--bin %s: %s must be executables there", dir, list)
	}
	if exe, err := os.Executable(); err == nil {
		if ps, ok := in(filepath.Dir(exe)); ok {
			return ps, "next to " + exe, nil
		}
	}
	ps := make([]string, len(names))
	for i, n := range names {
		if ps[i], err = osexec.LookPath(n); err != nil {
			return build(ctx, tmp, logf, names, list)
		}
	}
	return ps, "$PATH", nil
}

// build builds names from the toolbus module the current directory is in.
func build(ctx context.Context, tmp string, logf func(string, ...any), names []string, list string) ([]string, string, error) {
	out, err := osexec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return nil, "", fmt.Errorf("%s not found (--bin DIR, next to this executable, $PATH) and not inside the toolbus module to build them", list)
	}
	if mod, err := os.ReadFile(gomod); err != nil || !strings.Contains(string(mod), "module github.com/toolbus/toolbus\n") {
		return nil, "", fmt.Errorf("%s not found (--bin DIR, next to this executable, $PATH), and %s is not the toolbus module", list, gomod)
	}
	bin := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, "", err
	}
	logf("building %s into %s", list, bin)
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	ps := make([]string, len(names))
	for i, n := range names {
		args = append(args, "./cmd/"+n)
		ps[i] = filepath.Join(bin, n)
	}
	cmd := osexec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, p := range ps {
		if !isExecutable(p) {
			return nil, "", errors.New("go build made no " + p)
		}
	}
	return ps, "built from " + cmd.Dir, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
