package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/limits"
)

// runLimits is `toolbus limits`: the routers' admin verb limits (what each
// rule that counts the tool has used and left for the user and session),
// or limits.reset.
func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cn := newFlagSet("limits", stderr)
	tool := fs.String("tool", "", "the tool (none: every rule)")
	user := fs.String("user", "", "the toolbus user the counts are for")
	reset := fs.Bool("reset", false, "forget what the rules (or --rule) counted for the tool, user and session")
	rule := fs.String("rule", "", "with --reset: only this rule")
	asJSON := fs.Bool("json", false, "print the reply data as JSON")
	if err := parseNone(fs, args); err != nil {
		return err
	}
	if *rule != "" && !*reset {
		return usageError(fs, "--rule goes with --reset")
	}
	cl, closeConn, err := cn.open(ctx, fs)
	if err != nil {
		return err
	}
	defer closeConn()
	q := map[string]string{"tool": *tool, "user": *user, "session": cn.session}
	verb := "limits"
	if *reset {
		verb, q["rule"] = "limits.reset", *rule
	}
	var raw json.RawMessage
	if err := admin(ctx, cl, verb, "", q, &raw); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, raw)
	}
	if *reset {
		var r struct {
			Reset int `json:"reset"`
		}
		_ = json.Unmarshal(raw, &r)
		_, err := fmt.Fprintf(stdout, "reset %d count(s)\n", r.Reset)
		return err
	}
	var list struct {
		Limits []limits.Usage `json:"limits"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("admin limits: the reply is not a list: %w", err)
	}
	return printUsage(stdout, list.Limits)
}

func printUsage(w io.Writer, us []limits.Usage) error {
	if len(us) == 0 {
		_, err := fmt.Fprintln(w, "no quota or rate limit counts these calls")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKIND\tPER\tUSED\tLEFT\tLIMIT\tRESETS IN")
	for _, u := range us {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%v\n", u.Rule, u.Kind, u.Per, u.Used, u.Left, u.Limit, (time.Duration(u.ResetMS) * time.Millisecond).Round(time.Second))
	}
	return tw.Flush()
}
