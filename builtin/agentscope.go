package builtin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// The profiles of the built-in tools' names (Config.Names).
const (
	// NamesToolbus: read_file, write_file, edit_file, list_files,
	// search_files and shell (the default).
	NamesToolbus = "toolbus"
	// NamesAgentScope: the same tools under AgentScope 2.x's names and input
	// field names — Read, Write, Edit, Glob, Grep, Bash — for agents whose
	// prompts and models know those (docs/agentscope.md).
	NamesAgentScope = "agentscope"
)

// checkNames refuses an unknown profile.
func checkNames(n string) error {
	if n == "" || n == NamesToolbus || n == NamesAgentScope {
		return nil
	}
	return fmt.Errorf("builtin: unknown names profile %q (use %s or %s)", n, NamesToolbus, NamesAgentScope)
}

// The AgentScope-named inputs hold the fields of AgentScope's tools that the
// built-ins implement; the schemas refuse the others (additionalProperties
// false), so a model that asks for an option these tools lack (Read's pages,
// Grep's -A) learns it at once instead of being silently ignored.
type (
	// AsReadIn is Read's input.
	AsReadIn struct {
		FilePath string `json:"file_path"`
		Offset   int    `json:"offset,omitempty"`
		Limit    int    `json:"limit,omitempty"`
	}
	// AsWriteIn is Write's input.
	AsWriteIn struct {
		FilePath string `json:"file_path"`
		Content  string `json:"content"`
	}
	// AsEditIn is Edit's input.
	AsEditIn struct {
		FilePath   string `json:"file_path"`
		OldString  string `json:"old_string"`
		NewString  string `json:"new_string"`
		ReplaceAll bool   `json:"replace_all,omitempty"`
	}
	// AsBashIn is Bash's input; description is a label for people, unused.
	AsBashIn struct {
		Command     string `json:"command"`
		Description string `json:"description,omitempty"`
		Timeout     int    `json:"timeout,omitempty"`
	}
)

const (
	asPath       = `"file_path":{"type":"string","description":"The file, absolute inside the base directory or relative to it."}`
	asReadSchema = `{"type":"object","properties":{` + asPath + `,` + offsetProp + `,` +
		`"limit":{"type":"integer","minimum":1,"maximum":2000,"description":"How many lines to read (default 2000)."}},"required":["file_path"],"additionalProperties":false}`
	asWriteSchema = `{"type":"object","properties":{` + asPath + `,` + contentProp + `},"required":["file_path","content"],"additionalProperties":false}`
	asEditSchema  = `{"type":"object","properties":{` + asPath + `,` + editProps + `},"required":["file_path","old_string","new_string"],"additionalProperties":false}`
	asGlobSchema  = `{"type":"object","properties":{"pattern":{"type":"string","description":"A glob relative to path, such as *.go or **/*.md; ** crosses directories."},` +
		`"path":{"type":"string","description":"The directory to search in (default: the base directory)."}},"required":["pattern"],"additionalProperties":false}`
	asGrepSchema = `{"type":"object","properties":{` + searchProps + `},"required":["pattern"],"additionalProperties":false}`
	asBashSchema = `{"type":"object","properties":{"command":{"type":"string","description":"The command to run."},` +
		`"description":{"type":"string","description":"What the command does, in a few words, for the people watching."},` +
		`"timeout":{"type":"integer","minimum":0,"maximum":600000,"description":"Milliseconds before the command is stopped (default 120000)."}},"required":["command"],"additionalProperties":false}`
)

// asDef renames a file tool's definition: AgentScope's name, schema and the
// rule field its rules match (file_path).
func asDef(d bus.ToolDef, name, schema string) bus.ToolDef {
	d.Name, d.InputSchema = name, json.RawMessage(schema)
	if d.RuleField == "path" {
		d.RuleField = "file_path"
	}
	return d
}

// registerAgentScope registers the file tools under AgentScope's names.
func (t fileTools) registerAgentScope(w *worker.Worker) error {
	f := t.f
	where := " Paths are relative to the base directory " + f.base + " (or absolute inside it); nothing outside it can be reached."
	return cmp.Or( // the first error
		worker.Register(w, asDef(fileDef("Read", "Read a text file, with line numbers (from 1); use offset and limit for long files."+where, "", true, f.base), "Read", asReadSchema),
			func(_ context.Context, c *worker.Call, in AsReadIn) (string, error) {
				text, patch, err := f.Read(ReadIn{Path: in.FilePath, Offset: in.Offset, Limit: in.Limit})
				return patching(c, text, patch, err)
			}),
		worker.Register(w, asDef(fileDef("Write", "Write a whole file, creating it when needed. An existing file must have been read with Read first, unchanged since."+where, "", false, f.base), "Write", asWriteSchema),
			func(_ context.Context, c *worker.Call, in AsWriteIn) (string, error) {
				text, patch, err := f.Write(c.State, WriteIn{Path: in.FilePath, Content: in.Content})
				return patching(c, text, patch, err)
			}),
		worker.Register(w, asDef(fileDef("Edit", "Replace exact text in a file: old_string must appear exactly once unless replace_all is set. The file must have been read with Read first, unchanged since."+where, "", false, f.base), "Edit", asEditSchema),
			func(_ context.Context, c *worker.Call, in AsEditIn) (string, error) {
				text, patch, err := f.Edit(c.State, EditIn{Path: in.FilePath, OldString: in.OldString, NewString: in.NewString, ReplaceAll: in.ReplaceAll})
				return patching(c, text, patch, err)
			}),
		worker.Register(w, asDef(fileDef("Glob", "List files matching a glob (** crosses directories), sorted."+where, "", true, f.base), "Glob", asGlobSchema),
			func(ctx context.Context, _ *worker.Call, in ListIn) (string, error) { return f.List(ctx, in) }),
		worker.Register(w, asDef(fileDef("Grep", "Search files for lines matching an RE2 regular expression; prints path:line:text, bounded."+where, "", true, f.base), "Grep", asGrepSchema),
			func(ctx context.Context, _ *worker.Call, in SearchIn) (string, error) { return f.Search(ctx, in) }),
	)
}

// registerAgentScope registers the shell as AgentScope's Bash (timeout in
// milliseconds, as AgentScope's; no skill input).
func (s *Shell) registerAgentScope(w *worker.Worker) error {
	d := s.def()
	d.Name, d.InputSchema = "Bash", json.RawMessage(asBashSchema)
	return worker.Register(w, d, func(ctx context.Context, c *worker.Call, in AsBashIn) (string, error) {
		return s.Run(ctx, c.UserString(), ShellIn{Command: in.Command, TimeoutMS: in.Timeout})
	})
}
