package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/inbox"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/natsconn"
	"github.com/toolbus/toolbus/security"
)

// TestSecureInbox: router --secure --inbox-listen serves the inbox as the
// approver (parked.list, which carries each record's revision since 1.14,
// and P.approve.<tool> are all it needs): a write parked for a confirmation is listed with its
// revision and allowed from the page's API, and the write happens.
func TestSecureInbox(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	work := t.TempDir()
	const token = "inbox-test-token-0123456789"
	m, _ := startRun(t, []string{"--secure", dir, "--listen", "127.0.0.1:-1", "--data", filepath.Join(t.TempDir(), "data"),
		"--heartbeat", "500ms", "--workdir", work, "--inbox-listen", "127.0.0.1:0", "--inbox-token", token},
		regexp.MustCompile(`serving prefix "toolbus" on (\S+)[\s\S]*approval inbox on (http://\S+)`))
	natsURL, base := m[1], m[2]
	nc, err := natsconn.Config{URLs: natsURL, NKey: security.SeedFile(dir, "agent"), InboxPrefix: "_INBOX.agent"}.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := client.New(nc, client.Config{})
	var reply *bus.Reply
	testkit.CheckFor(t, testkit.SetupWait, 10*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), testkit.SetupWait)
		defer cancel()
		reply, err = cl.Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "write_file", Input: json.RawMessage(`{"path":"a.txt","content":"hi"}`)}}})
		if err == nil && len(reply.Parked) == 0 && len(reply.Results) == 1 && reply.Results[0].Error != nil && reply.Results[0].Error.Code == bus.CodeUnknownTool {
			// The router answers before its built-in worker's first
			// heartbeat has listed write_file (a loaded machine): ask again.
			return fmt.Errorf("write_file not listed yet: %+v", reply.Results[0])
		}
		return err
	})
	if len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindConfirm {
		t.Fatalf("reply %+v", reply)
	}

	api := func(method, path string, body any, out any) int {
		t.Helper()
		var rd *strings.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		} else {
			rd = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set(inbox.TokenHeader, token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	var list struct {
		Calls []inbox.Item `json:"calls"`
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		api(http.MethodGet, "/api/calls", nil, &list)
		if len(list.Calls) != 1 {
			return os.ErrNotExist
		}
		return nil
	})
	it := list.Calls[0]
	if it.Tool != "write_file" || it.Revision == 0 || it.Note != "" || it.InputDigest != bus.InputDigest(json.RawMessage(`{"path":"a.txt","content":"hi"}`)) {
		t.Fatalf("listed %+v", it)
	}
	var out inbox.Outcome
	if code := api(http.MethodPost, "/api/act", inbox.Act{Key: it.Key, Revision: it.Revision, InputDigest: it.InputDigest, Action: "allow"}, &out); code != http.StatusOK || !out.OK {
		t.Fatalf("allow: %d %+v", code, out)
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := os.Stat(filepath.Join(work, "a.txt"))
		return err
	})
}

// TestInboxTokenNotLogged: a token the router generates for the inbox is
// kept in a private file (mode 0600, in the --secure directory), whose
// path the router prints; the token itself is in neither its output nor
// its log. The page then takes the token from the file, and an action
// sent as application/jsonx (a look-alike type) is refused with 415.
func TestInboxTokenNotLogged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	m, stderr := startRun(t, []string{"--secure", dir, "--listen", "127.0.0.1:-1", "--data", filepath.Join(t.TempDir(), "data"),
		"--heartbeat", "500ms", "--inbox-listen", "127.0.0.1:0"},
		regexp.MustCompile(`(?s)^(.*approval inbox on (http://\S+) — open \S+ and give it the token in (\S+) \(.*)$`))
	out, base, file := m[1], m[2], m[3]
	if file != filepath.Join(dir, inbox.TokenFile) {
		t.Fatalf("token kept in %s, want %s", file, filepath.Join(dir, inbox.TokenFile))
	}
	fi, err := os.Lstat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", err, fi)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 32 || strings.Contains(out, token) || strings.Contains(stderr.String(), token) {
		t.Fatalf("the generated token %q is in the router's output or log:\n%s\n%s", token, out, stderr.String())
	}
	do := func(ct string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/act", strings.NewReader(`{}`))
		req.Header.Set(inbox.TokenHeader, token)
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := do("application/jsonx"); got != http.StatusUnsupportedMediaType {
		t.Fatalf("an action as application/jsonx: %d, want 415", got)
	}
	if got := do("application/json"); got == http.StatusUnsupportedMediaType || got == http.StatusForbidden || got == http.StatusUnauthorized {
		t.Fatalf("an action as application/json with the file's token: %d", got)
	}
}
