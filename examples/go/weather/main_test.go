package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/xtest"
	"github.com/toolbus/toolbus/natsconn"
)

// TestWeather runs the example as a newcomer does, with $NATS_URL naming a
// router's server, calls get_weather through the router, then stops it as
// SIGTERM does.
func TestWeather(t *testing.T) {
	x := xtest.Run(t, xtest.Config{Routers: 1})
	t.Setenv(natsconn.EnvURL, x.URL(0))
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	out, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, outW); outW.Close() }()
	lines := make(chan string, 1)
	go func() {
		first, _ := bufio.NewReader(out).ReadString('\n')
		lines <- first
		_, _ = io.Copy(io.Discard, out)
	}()
	if line := testkit.Recv(t, lines, testkit.SetupWait, "the example serving"); !strings.Contains(line, "serving get_weather") {
		t.Fatalf("the example printed %q", line)
	}
	nc, err := x.Connect(ctx, xtest.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, testkit.SetupWait)
	defer cancel()
	reply, err := client.New(nc, client.Config{}).Call(cctx, "weather-example",
		bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "get_weather", Input: json.RawMessage(`{"city":"Oslo"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := reply.Results; len(r) != 1 || r[0].State != bus.StateSuccess || len(r[0].Output) != 1 || r[0].Output[0].Text != "4°C, rain in Oslo" {
		t.Fatalf("get_weather answered %+v", reply)
	}
	stop() // as SIGTERM does
	if err := testkit.Recv(t, done, testkit.SetupWait, "the example stopping"); err != nil {
		t.Fatalf("the example stopped with %v", err)
	}
}

// TestReadmeIsTheExample: the README's "Write a tool" snippet is this
// example's code, paragraph by paragraph (indentation aside), so the one
// cannot drift from the other, which its test runs against a router.
func TestReadmeIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, snippet, ok := strings.Cut(string(readme), "### Write a tool\n")
	if snippet, _, _ = strings.Cut(snippet, "\n```\n"); !ok || !strings.Contains(snippet, "```go\n") {
		t.Fatal("README has no Write a tool snippet")
	}
	_, snippet, _ = strings.Cut(snippet, "```go\n")
	code := unindent(string(src))
	for para := range strings.SplitSeq(unindent(snippet), "\n\n") {
		if !strings.Contains(code, para) {
			t.Errorf("the README's snippet has what main.go has not:\n%s", para)
		}
	}
}

// unindent drops each line's leading white space.
func unindent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, " \t")
	}
	return strings.Join(lines, "\n")
}
