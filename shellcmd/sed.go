package shellcmd

import (
	"fmt"
	"strings"
)

// checkSed refuses sed's ways to run programs or write other files (e, s///e,
// s///w, w, W, -f); with -i every file operand is written.
func checkSed(args []string) ([]Write, error) {
	var scripts []string
	inPlace, haveE, follow := false, false, false
	suffix := "" // -i's backup suffix: GNU sed renames each file to it

	opts, ops := getopt(args, "efli?", []string{"--expression", "--file", "--line-length"})
	for _, o := range opts {
		switch {
		case o.name == "-e" || isLong(o.name, "--expression"):
			scripts, haveE = append(scripts, o.value), true
		case o.name == "-f" || isLong(o.name, "--file"):
			return nil, fmt.Errorf("sed %s reads its script from a file, which the check cannot see", o.name)
		case o.name == "-i" || isLong(o.name, "--in-place"):
			inPlace, suffix = true, o.value
		case isLong(o.name, "--follow-symlinks"):
			follow = true
		}
	}
	if !haveE {
		if len(ops) == 0 {
			return nil, fmt.Errorf("sed has no script")
		}
		scripts, ops = ops[:1], ops[1:]
	}
	for _, s := range scripts {
		if err := sedScript(s); err != nil {
			return nil, err
		}
	}
	if !inPlace {
		return nil, nil
	}
	if suffix != "" && follow {
		return nil, fmt.Errorf("sed --follow-symlinks with a backup suffix names its backup after the link's target, which the check cannot see")
	}
	out := make([]Write, 0, 2*len(ops))
	for _, o := range ops {
		out = append(out, Write{Path: o, By: "sed -i"})
		if b := sedBackup(o, suffix); b != "" {
			out = append(out, Write{Path: b, By: "sed -i (its backup)"})
		}
	}
	return out, nil
}

// sedBackup is where sed -iSUFFIX moves file: file+SUFFIX, or SUFFIX with
// each '*' replaced by file (issue 26); "" for no backup.
func sedBackup(file, suffix string) string {
	switch {
	case suffix == "" || suffix == "*":
		return ""
	case strings.Contains(suffix, "*"):
		return strings.ReplaceAll(suffix, "*", file)
	}
	return file + suffix
}

// sedScript reads a GNU sed script far enough to find every command and
// every s flag; what it cannot read is refused.
func sedScript(s string) error {
	p := &sedParser{s: s}
	for {
		p.skip(" \t\n;")
		if p.eof() {
			return nil
		}
		if p.peek() == '#' {
			p.toEOL()
			continue
		}
		if err := p.address(); err != nil {
			return err
		}
		p.skip(" \t")
		if !p.eof() && p.peek() == ',' {
			p.i++
			p.skip(" \t")
			if err := p.address(); err != nil {
				return err
			}
		}
		p.skip(" \t")
		for !p.eof() && p.peek() == '!' {
			p.i++
			p.skip(" \t")
		}
		if p.eof() {
			return fmt.Errorf("sed script ends after an address")
		}
		if err := p.command(); err != nil {
			return err
		}
	}
}

type sedParser struct {
	s string
	i int
}

func (p *sedParser) eof() bool { return p.i >= len(p.s) }

// peek is the next byte, 0 at the end.
func (p *sedParser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.s[p.i]
}

func (p *sedParser) skip(set string) {
	for !p.eof() && strings.IndexByte(set, p.peek()) >= 0 {
		p.i++
	}
}

// toEOL skips to the end of the line (past backslash-newline pairs).
func (p *sedParser) toEOL() {
	for !p.eof() && p.peek() != '\n' {
		if p.peek() == '\\' {
			p.i++
		}
		p.i++
	}
}

// toEnd skips a label or similar argument, which ends at ; or a newline.
func (p *sedParser) toEnd() {
	for !p.eof() && p.peek() != '\n' && p.peek() != ';' {
		p.i++
	}
}

// delimited skips n parts of text, each up to the unescaped delimiter d
// and past it.
func (p *sedParser) delimited(d byte, n int) error {
	for !p.eof() {
		c := p.peek()
		p.i++
		switch {
		case c == '\\':
			p.i++
		case c != d:
		case n == 1:
			return nil
		default:
			n--
		}
	}
	return fmt.Errorf("sed script has an unterminated expression")
}

func (p *sedParser) address() error {
	switch c := p.peek(); {
	case c >= '0' && c <= '9', c == '+', c == '~':
		p.i++
		p.skip("0123456789~")
	case c == '$':
		p.i++
	case c == '/', c == '\\':
		d := byte('/')
		p.i++
		if c == '\\' {
			if p.eof() {
				return fmt.Errorf("sed script ends in an address")
			}
			d = p.peek()
			p.i++
		}
		if err := p.delimited(d, 1); err != nil {
			return err
		}
		p.skip("IM")
	}
	return nil
}

// command reads one command at p.i.
func (p *sedParser) command() error {
	c := p.peek()
	p.i++
	switch c {
	case '{', '}', '=', 'd', 'D', 'g', 'G', 'h', 'H', 'n', 'N', 'p', 'P', 'x', 'z', 'F':
	case 'l', 'L', 'q', 'Q':
		p.skip(" \t0123456789")
	case ':', 'b', 't', 'T', 'v':
		p.toEnd()
	case 'a', 'i', 'c', 'r', 'R':
		p.toEOL()
	case 'w', 'W':
		return fmt.Errorf("sed's %c command writes a file of the caller's choosing", c)
	case 'e':
		return fmt.Errorf("sed's e command runs other programs")
	case 's':
		return p.substitute()
	case 'y':
		if p.eof() {
			return fmt.Errorf("sed script ends in a y command")
		}
		d := p.peek()
		p.i++
		return p.delimited(d, 2)
	default:
		return fmt.Errorf("sed command %q is not one the check knows", string(c))
	}
	return nil
}

func (p *sedParser) substitute() error {
	if p.eof() || p.peek() == '\n' || p.peek() == '\\' {
		return fmt.Errorf("sed s command has no delimiter")
	}
	d := p.peek()
	p.i++
	if err := p.delimited(d, 2); err != nil {
		return err
	}
	for !p.eof() {
		switch f := p.peek(); {
		case f == 'e':
			return fmt.Errorf("sed's s///e flag runs the pattern space as a command")
		case f == 'w':
			return fmt.Errorf("sed's s///w flag writes a file of the caller's choosing")
		case f == 'g', f == 'p', f == 'i', f == 'I', f == 'm', f == 'M', f >= '0' && f <= '9':
			p.i++
		case f == ';', f == '\n', f == '}', f == ' ', f == '\t', f == '#':
			return nil
		default:
			return fmt.Errorf("sed s command has the unknown flag %q", string(f))
		}
	}
	return nil
}
