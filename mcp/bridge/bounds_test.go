package bridge

import (
	"bytes"

	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{strings.Repeat("a", 100), 40, strings.Repeat("a", 20) + " […cut: 100 bytes]"},
		{strings.Repeat("é", 50), 40, strings.Repeat("é", 10) + " […cut: 100 bytes]"}, // whole runes
	} {
		got := cut(tc.in, tc.limit)
		if got != tc.want || len(got) > tc.limit {
			t.Errorf("cut(%d bytes, %d) = %q, want %q", len(tc.in), tc.limit, got, tc.want)
		}
	}
}

// limited reads in through a lineLimiter of limit bytes.
func limited(in string, limit int64) (string, []string, error) {
	var cuts []string
	out, err := io.ReadAll(newLineLimiter(strings.NewReader(in), limit, func(w string) { cuts = append(cuts, w) }))
	return string(out), cuts, err
}

func TestLineLimiter(t *testing.T) {
	big := strings.Repeat("x", 200)
	respCut := `{"jsonrpc":"2.0","id":7,"result":{"t":"` + big + `"}}`
	noteCut := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"m":"` + big + `"}}`
	for _, tc := range []struct {
		name, in string
		want     string // "" with err: the stream fails
		cuts     int
		err      bool
	}{
		{"within", "{\"id\":1}\n{\"id\":2}\n", "{\"id\":1}\n{\"id\":2}\n", 0, false},
		{"response_cut", respCut + "\n" + `{"id":8}` + "\n",
			respCut[:64] + "\n" + `{"error":{"code":-32603,"message":"the MCP server's message exceeds the bridge's limit of 64 bytes; refused"},"id":7,"jsonrpc":"2.0"}` +
				"\n" + `{"id":8}` + "\n", 1, false},
		{"string_id", `{"id":"a-1","result":"` + big + "\"}\n", "", 1, false},
		{"notification_dropped", noteCut + "\n{\"id\":9}\n", noteCut[:64] + "\n{\"id\":9}\n", 1, false},
		{"unknown_kind", `{"result":"` + big + "\"}\n", "", 1, true},
		{"not_json", big + "\n", "", 1, true},
		{"no_newline_yet", `{"id":1,"result":"` + big, "", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cuts, err := limited(tc.in, 64)
			if (err != nil) != tc.err || len(cuts) != tc.cuts {
				t.Fatalf("err %v, cuts %v", err, cuts)
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
			for line := range strings.Lines(got) {
				if len(line) > 64+1 && !strings.Contains(line, "exceeds the bridge's limit") {
					t.Fatalf("a line of %d bytes passed", len(line))
				}
			}
		})
	}
}

// FuzzLineLimiter: no line longer than the limit passes (but the limiter's
// own error responses), and lines within it pass unchanged unless a cut
// line of unknown kind ended the stream.
func FuzzLineLimiter(f *testing.F) {
	f.Add([]byte("{\"id\":1,\"result\":\""+strings.Repeat("y", 100)+"\"}\n{\"id\":2}\n"), uint8(32))
	f.Add([]byte("{\"method\":\"x\"}\n\n\n"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, lim uint8) {
		limit := int64(lim) + 1
		out, err := io.ReadAll(newLineLimiter(bytes.NewReader(in), limit, func(string) {}))
		for line := range strings.Lines(string(out)) {
			if int64(len(line)) > limit+1 && !strings.Contains(line, "exceeds the bridge's limit") {
				t.Fatalf("a line of %d bytes passed a limit of %d", len(line), limit)
			}
		}
		if err != nil {
			return // a cut line of unknown kind ends the stream
		}
		for line := range strings.Lines(string(in)) {
			if strings.HasSuffix(line, "\n") && int64(len(line)) <= limit && !strings.Contains(string(out), line) {
				t.Fatalf("line %q within the limit was lost", line)
			}
		}
	})
}

type body struct{ io.Reader }

func (body) Close() error { return nil }

func TestLimitedBody(t *testing.T) {
	for _, tc := range []struct {
		name string
		sse  bool
		in   string
		fail bool
	}{
		{"json_within", false, strings.Repeat("a", 64), false},
		{"json_over", false, strings.Repeat("a", 65), true},
		{"sse_events_within", true, strings.Repeat("data: "+strings.Repeat("a", 50)+"\n\n", 100), false},
		{"sse_crlf_events_within", true, strings.Repeat("data: "+strings.Repeat("a", 50)+"\r\n\r\n", 100), false},
		{"sse_event_over", true, "data: a\n\n" + strings.Repeat("data: "+strings.Repeat("a", 20)+"\n", 4) + "\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := "application/json"
			if tc.sse {
				ct = "text/event-stream"
			}
			rt := limitTransport{limit: 64, base: roundTrip(func(*http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {ct}}, Body: body{strings.NewReader(tc.in)}}, nil
			})}
			resp, err := rt.RoundTrip(&http.Request{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			if tc.fail != (err != nil) || err != nil && !strings.Contains(err.Error(), "exceeds the bridge's limit of 64 bytes") {
				t.Fatalf("read: %v", err)
			}
		})
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestProgressGate: a burst sends its first notice at once and its latest
// one progressEvery later, nothing between; a gate closed with a notice
// pending sends nothing more.
func TestProgressGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sent []string
		g := newProgressGate(250*time.Millisecond, func(s string) {
			mu.Lock()
			sent = append(sent, s)
			mu.Unlock()
		})
		got := func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), sent...)
		}
		for _, s := range []string{"1", "2", "3", "4"} {
			g.offer(s)
		}
		if s := got(); len(s) != 1 || s[0] != "1" {
			t.Fatalf("at once: %v", s)
		}
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		if s := got(); len(s) != 2 || s[1] != "4" {
			t.Fatalf("after the interval: %v", s)
		}
		g.offer("5")
		g.close()
		time.Sleep(time.Second)
		synctest.Wait()
		if s := got(); len(s) != 2 {
			t.Fatalf("after close: %v", s)
		}
		g.offer(strings.Repeat("p", 5000)) // closed: dropped
		if s := got(); len(s) != 2 {
			t.Fatalf("offer after close: %v", s)
		}
	})
	g := newProgressGate(time.Hour, func(s string) {
		if len(s) > maxProgressText {
			t.Errorf("a progress text of %d bytes", len(s))
		}
	})
	g.offer(strings.Repeat("p", 5000))
	g.close()
}
