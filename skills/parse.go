package skills

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	yamlnodes "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// File is the name of the file that makes a folder a skill.
const File = "SKILL.md"

// Limits of the Agent Skills format and of this implementation.
const (
	MaxNameLen          = 64
	MaxDescriptionLen   = 1024
	MaxCompatibilityLen = 500
	// MaxFrontMatter bounds the YAML between the two --- lines.
	MaxFrontMatter = 64 << 10
	// maxExpanded bounds the front matter's text once its aliases are
	// expanded (counted before decoding, which expands them).
	maxExpanded = 1 << 20
)

// Meta is the front matter of a SKILL.md.
type Meta struct {
	Name          string
	Description   string
	License       string
	Compatibility string
	// Metadata holds the metadata mapping and every key the format does
	// not name (a non-string value as its JSON text).
	Metadata map[string]string
	// AllowedTools is allowed-tools split at white space.
	AllowedTools []string
}

// Error is a SKILL.md or skill folder that breaks a rule: File names it,
// Rule says which rule, in words a skill author can act on.
type Error struct {
	File string
	Rule string
}

func (e *Error) Error() string { return "skill " + e.File + ": " + e.Rule }

var nameRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// CheckName reports why name is not a valid skill name, or nil.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("name is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("name %q is longer than %d characters", name, MaxNameLen)
	case !nameRE.MatchString(name):
		return fmt.Errorf("name %q must be lower-case letters, digits and single hyphens, not starting or ending with a hyphen", name)
	}
	return nil
}

// Parse checks the SKILL.md data of the skill folder named folder (file
// names it in errors) and returns its front matter and body. CRLF line
// ends are read as LF. Every error is an *Error.
func Parse(file, folder string, data []byte) (Meta, string, error) {
	fail := func(format string, args ...any) (Meta, string, error) {
		return Meta{}, "", &Error{File: file, Rule: fmt.Sprintf(format, args...)}
	}
	if !utf8.Valid(data) {
		return fail("is not UTF-8 text")
	}
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	text = strings.TrimPrefix(text, "\ufeff")
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return fail("must start with a '---' line that opens the YAML front matter")
	}
	// The front matter ends at the first '---' line, which may be the first
	// line of rest or its last (without a line end).
	front, body, closed := strings.Cut("\n"+rest, "\n---\n")
	if !closed {
		front, closed = strings.CutSuffix("\n"+rest, "\n---")
	}
	switch {
	case !closed && len(rest) > MaxFrontMatter:
		return fail("front matter is larger than 64 KiB (and has no closing '---' line)")
	case !closed:
		return fail("front matter has no closing '---' line")
	}
	front = strings.TrimPrefix(front, "\n") // the line end put in front of rest
	if len(front) > MaxFrontMatter {
		return fail("front matter is %d bytes, larger than 64 KiB", len(front))
	}
	switch n, err := expandedSize(front); {
	case err != nil:
		return fail("front matter is not YAML: %v", err)
	case n > maxExpanded:
		return fail("front matter is larger than 1 MiB once its aliases (*name) are expanded")
	}
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(front), &raw); err != nil {
		return fail("front matter is not YAML: %v", err)
	}
	if raw == nil {
		if strings.TrimSpace(front) != "" {
			return fail("front matter must be a YAML mapping of keys to values")
		}
		return fail("front matter has no name: 'name' is required")
	}
	known := []string{"name", "description", "license", "compatibility", "allowed-tools", "metadata"}
	for _, k := range known[:5] { // the string keys
		if v := raw[k]; v != nil {
			if _, isStr := v.(string); !isStr {
				return fail("'%s' must be a string, got %s", k, yamlType(v))
			}
		}
	}
	str := func(key string) string { s, _ := raw[key].(string); return s }
	m := Meta{Name: str("name"), Description: str("description"), License: str("license"), Compatibility: str("compatibility"),
		AllowedTools: strings.Fields(str("allowed-tools"))}
	if raw["name"] == nil {
		return fail("front matter has no name: 'name' is required")
	}
	if err := CheckName(m.Name); err != nil {
		return fail("%v", err)
	}
	if m.Name != folder {
		return fail("name %q differs from its folder name %q; they must be equal", m.Name, folder)
	}
	switch n := utf8.RuneCountInString(m.Description); {
	case strings.TrimSpace(m.Description) == "":
		return fail("description is empty: 'description' is required (1-%d characters)", MaxDescriptionLen)
	case n > MaxDescriptionLen:
		return fail("description is %d characters, longer than %d", n, MaxDescriptionLen)
	}
	if n := utf8.RuneCountInString(m.Compatibility); n > MaxCompatibilityLen {
		return fail("compatibility is %d characters, longer than %d", n, MaxCompatibilityLen)
	}
	m.Metadata = map[string]string{}
	if v, ok := raw["metadata"]; ok && v != nil {
		mm, isMap := v.(map[string]any)
		if !isMap {
			return fail("'metadata' must be a mapping of strings to strings, got %s", yamlType(v))
		}
		for k, val := range mm {
			s, isStr := val.(string)
			if !isStr {
				return fail("metadata %q must be a string, got %s", k, yamlType(val))
			}
			m.Metadata[k] = s
		}
	}
	for k, v := range raw {
		if slices.Contains(known, k) {
			continue
		}
		if s, isStr := v.(string); isStr {
			m.Metadata[k] = s
			continue
		}
		b, _ := json.Marshal(v)
		m.Metadata[k] = string(bytes.TrimSpace(b))
	}
	body = strings.TrimLeft(body, "\n")
	if strings.TrimSpace(body) == "" {
		return fail("body is empty: the instructions after the front matter are required")
	}
	return m, body, nil
}

// expandedSize returns the size of the YAML text front as decoding expands
// it, each alias counting as the node it names (up to maxExpanded+1, also
// for a node that holds an alias of itself). It reads the text as a tree of
// nodes, which expands nothing: 30 KB of text repeated by 100 aliases of a
// list of 100 aliases cost a decode 6 s and 2.6 GB (session 28, red team).
func expandedSize(front string) (int, error) {
	var doc yamlnodes.Node
	if err := yamlnodes.Unmarshal([]byte(front), &doc); err != nil {
		return 0, err
	}
	sizes := map[*yamlnodes.Node]int{}
	var size func(n *yamlnodes.Node) int
	size = func(n *yamlnodes.Node) int {
		if n.Kind == yamlnodes.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		if s, seen := sizes[n]; seen {
			return s
		}
		sizes[n] = maxExpanded + 1 // while counting n: an alias of n inside it
		s := len(n.Value) + 1
		for _, c := range n.Content {
			if s += size(c); s > maxExpanded {
				break
			}
		}
		sizes[n] = min(s, maxExpanded+1)
		return sizes[n]
	}
	return size(&doc), nil
}

func yamlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int64, int:
		return "a number"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
