package main

import (
	"context"
	"io"
	"slices"

	"github.com/toolbus/toolbus/bus"
)

// formats are the listing formats of io.toolbus.tools.query.
var formats = []string{bus.FormatToolbus, bus.FormatOpenAI, bus.FormatOpenAIResponses,
	bus.FormatAnthropic, bus.FormatGemini, bus.FormatMCP}

func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("tools", stderr)
	format := fs.String("format", bus.FormatToolbus, "listing format: toolbus, openai, openai-responses, anthropic, gemini or mcp")
	asJSON := fs.Bool("json", false, "print the reply data as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fs, "tools takes no arguments, got %q", pos[0])
	}
	if !slices.Contains(formats, *format) {
		return usageError(fs, "unknown --format %q", *format)
	}
	cl, closeConn, err := cn.open(fs)
	if err != nil {
		return err
	}
	defer closeConn()
	list, err := cl.Tools(ctx, cn.session, *format, nil)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, list)
	}
	renderTools(stdout, list)
	return nil
}
