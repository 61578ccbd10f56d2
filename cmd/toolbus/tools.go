package main

import (
	"context"
	"flag"
	"io"
	"slices"

	"github.com/toolbus/toolbus/bus"
)

// formats are the listing formats of io.toolbus.tools.query.
var formats = []string{bus.FormatToolbus, bus.FormatOpenAI, bus.FormatOpenAIResponses,
	bus.FormatAnthropic, bus.FormatGemini, bus.FormatMCP}

func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("tools", stderr)
	format := fs.String("format", bus.FormatToolbus, "print the tools as the model sees them, as JSON, in this format: toolbus, openai, openai-responses, anthropic, gemini or mcp (without it: a readable list)")
	asJSON := fs.Bool("json", false, "print the whole reply data (tools in --format, groups, skills_prompt) as JSON")
	deferred := fs.Bool("deferred", false, "also list the tools of inactive meta groups, deferred for the provider's tool search (with --format openai-responses or anthropic)")
	user := fs.String("user", "", "list as this toolbus user sees it (their skills); refused by a secured router unless it is the credentials' own")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if !slices.Contains(formats, *format) {
		return usageError(fs, "unknown --format %q", *format)
	}
	if *deferred && *format != bus.FormatOpenAIResponses && *format != bus.FormatAnthropic {
		return usageError(fs, "--deferred needs --format openai-responses or anthropic")
	}
	q := bus.ToolsQuery{Format: *format, Deferred: *deferred}
	var err error
	if q.User, err = jsonOrString(fs, "--user", *user); err != nil {
		return err
	}
	cl, closeConn, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	defer closeConn()
	list, err := cl.Query(ctx, cn.session, q)
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		return writeJSON(stdout, list)
	case formatSet(fs):
		return writeJSON(stdout, list.Tools)
	}
	renderTools(stdout, list)
	return nil
}

// formatSet reports whether --format was given: then the listing is printed
// in that format, exactly as the model receives it.
func formatSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "format" })
	return set
}
