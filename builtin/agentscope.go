package builtin

import (
	"context"
	"encoding/json"
	"fmt"

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

// AgentScope's inputs hold the fields of its tools that the built-ins
// implement (Read, Write and Edit share toolbus's input types, the path
// as FilePath); the schemas refuse the others (additionalProperties
// false), so a model that asks for an option these tools lack (Read's
// pages, Grep's -A) learns it at once instead of being silently ignored.

// AsBashIn is Bash's input; description is a label for people, unused.
type AsBashIn struct {
	Command     string `json:"command"`
	Description string `json:"description,omitempty"`
	Timeout     int    `json:"timeout,omitempty"`
}

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

// registerAgentScope registers the shell as AgentScope's Bash (timeout in
// milliseconds, as AgentScope's; no skill input).
func (s *Shell) registerAgentScope(w *worker.Worker) error {
	d := s.def()
	d.Name, d.InputSchema = "Bash", json.RawMessage(asBashSchema)
	return worker.Register(w, d, func(ctx context.Context, c *worker.Call, in AsBashIn) (string, error) {
		return s.Run(ctx, c.UserString(), ShellIn{Command: in.Command, TimeoutMS: in.Timeout})
	})
}
