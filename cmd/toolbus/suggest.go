package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// suggestTools prints "did you mean" for every result of r that names an
// unknown tool, from the tools session's model sees; a listing that fails
// only loses the hint.
func suggestTools(ctx context.Context, cl *client.Client, session string, r *bus.Reply, w io.Writer) {
	var unknown []string
	for _, res := range r.Results {
		if res.Error != nil && res.Error.Code == bus.CodeUnknownTool && !slices.Contains(unknown, res.Name) {
			unknown = append(unknown, res.Name)
		}
	}
	if len(unknown) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	list, err := cl.Tools(ctx, session, "", nil)
	if err != nil {
		return
	}
	var names []string
	for _, raw := range list.Tools {
		var t struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &t) == nil && t.Name != "" {
			names = append(names, t.Name)
		}
	}
	for _, name := range unknown {
		if near := nearest(name, names); len(near) > 0 {
			fmt.Fprintf(w, "no tool %q: did you mean %s? (toolbus tools lists them)\n", name, strings.Join(near, " or "))
		} else {
			fmt.Fprintf(w, "no tool %q in session %s (toolbus tools lists them)\n", name, session)
		}
	}
}

// nearest returns the names closest to name (case-insensitive edit
// distance at most a third of its length, at least 2), best first, at most 3.
func nearest(name string, names []string) []string {
	limit := max(2, len(name)/3)
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for _, n := range names {
		if d := editDistance(strings.ToLower(name), strings.ToLower(n)); d <= limit {
			cs = append(cs, cand{n, d})
		}
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return a.d - b.d })
	var out []string
	for _, c := range cs[:min(3, len(cs))] {
		out = append(out, c.name)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
