package inbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

// Act is what the page sends to answer one call: the call's key, and the
// revision and input digest of the record it showed.
type Act struct {
	Key         string `json:"key"`
	Revision    uint64 `json:"revision"`
	InputDigest string `json:"input_digest"`
	// Action is allow, deny or answer.
	Action string `json:"action"`
	// Rules to remember with allow: among the call's suggested_rules.
	Rules []bus.Rule `json:"rules,omitempty"`
	// Reason of a deny.
	Reason string `json:"reason,omitempty"`
	// State (success or error), Format (text or json) and Output of an
	// answer to an external call.
	State  string `json:"state,omitempty"`
	Format string `json:"format,omitempty"`
	Output string `json:"output,omitempty"`
}

// Outcome is the reply to an Act.
type Outcome struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	// Code is the router's refusal code (not_parked, already_answered,
	// bad_request), or the inbox's own: changed, gone, bad_request, and
	// unavailable (the call could not be read: nothing was answered).
	Code string `json:"code,omitempty"`
}

// isJSON reports whether a Content-Type is application/json (parameters
// allowed): a form's text/plain must not pass without a preflight.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// maxAct bounds an Act's body.
const maxAct = 1 << 20

func (s *Server) serveAct(w http.ResponseWriter, r *http.Request) {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeJSON(w, http.StatusUnsupportedMediaType, Outcome{Code: bus.CodeBadRequest, Message: "send application/json"})
		return
	}
	var a Act
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAct))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		writeJSON(w, http.StatusBadRequest, Outcome{Code: bus.CodeBadRequest, Message: "the request is not an action: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	code, out := s.act(ctx, a)
	writeJSON(w, code, out)
}

// act checks a against the call as the inbox sees it now, then sends the
// answer; the router checks the digest again and takes the first answer.
func (s *Server) act(ctx context.Context, a Act) (int, Outcome) {
	if !validKey(a.Key) {
		return http.StatusBadRequest, Outcome{Code: bus.CodeBadRequest, Message: fmt.Sprintf("%q is not a call key <session>.<replyid>.<callid>", a.Key)}
	}
	err := s.refresh(ctx, a.Key) // the record as it is now, not as the watch last said
	it, ok := s.lookup(a.Key)
	if !ok && err != nil {
		// Not listed yet (parked a moment ago) and not readable now: the
		// call may well wait, so it is not "gone".
		return http.StatusServiceUnavailable, Outcome{Code: bus.CodeUnavailable, Message: fmt.Sprintf("call %s could not be read now (%v): nothing was answered; try again", a.Key, err)}
	}
	if !ok {
		return http.StatusConflict, Outcome{Code: "gone", Message: fmt.Sprintf("call %s no longer waits: it was answered (maybe from another page), cancelled or expired", a.Key)}
	}
	if a.Revision != it.Revision {
		return http.StatusConflict, Outcome{Code: "changed", Message: fmt.Sprintf("call %s of %s changed since the page showed it (revision %d, now %d): look at it again before answering", it.ID, it.Tool, a.Revision, it.Revision)}
	}
	if it.Note != "" {
		return http.StatusConflict, Outcome{Code: bus.CodeBadRequest, Message: fmt.Sprintf("call %s of %s cannot be answered here: %s", it.ID, it.Tool, it.Note)}
	}
	ans, err := answerOf(it, a)
	if err == nil && it.Kind == bus.KindExternal {
		err = s.checkOutput(ctx, it.Tool, a)
	}
	if err != nil {
		return http.StatusBadRequest, Outcome{Code: bus.CodeBadRequest, Message: err.Error()}
	}
	send := s.cl.Parked().Answer
	if it.Kind == bus.KindConfirm {
		send = s.cl.Parked().Confirm // P.approve.<tool>: the router checks the digest
	}
	if err := send(ctx, it.Tool, it.Session, it.ReplyID, it.ID, ans); err != nil {
		if be, ok := errors.AsType[*bus.Error](err); ok {
			return http.StatusConflict, Outcome{Code: be.Code, Message: "the router refused: " + be.Message}
		}
		return http.StatusBadGateway, Outcome{Code: bus.CodeInternal, Message: "the answer did not reach a router: " + err.Error()}
	}
	return http.StatusOK, Outcome{OK: true, Message: doneText(it, a)}
}

// answerOf is the answer a asks for, checked against the call's kind.
func answerOf(it Item, a Act) (bus.Answer, error) {
	switch a.Action {
	case "allow", "deny":
		if it.Kind != bus.KindConfirm {
			return bus.Answer{}, fmt.Errorf("call %s waits for its external result, not a confirmation: answer it", it.ID)
		}
		yes := a.Action == "allow"
		ans := bus.Answer{Confirmed: &yes, InputDigest: a.InputDigest}
		if yes {
			ans.Rules = a.Rules
		} else {
			if len(a.Reason) > bus.MaxDenyReason || !utf8.ValidString(a.Reason) {
				return bus.Answer{}, fmt.Errorf("the reason must be UTF-8 text of at most %d bytes", bus.MaxDenyReason)
			}
			ans.Reason = strings.TrimSpace(a.Reason)
		}
		return ans, nil
	case "answer":
		if it.Kind != bus.KindExternal {
			return bus.Answer{}, fmt.Errorf("call %s waits for a confirmation: allow or deny it", it.ID)
		}
		state := cmp.Or(a.State, bus.StateSuccess)
		if state != bus.StateSuccess && state != bus.StateError {
			return bus.Answer{}, fmt.Errorf("state must be success or error, got %q", a.State)
		}
		out, err := outputOf(a.Format, a.Output)
		if err != nil {
			return bus.Answer{}, err
		}
		return bus.Answer{State: state, Output: out}, nil
	}
	return bus.Answer{}, fmt.Errorf("action must be allow, deny or answer, got %q", a.Action)
}

// outputOf is an external answer's output: a text block of the text or of
// compact JSON, or the array of blocks given.
func outputOf(format, s string) ([]bus.Block, error) {
	if !utf8.ValidString(s) {
		return nil, errors.New("the output is not UTF-8 text")
	}
	switch format {
	case "", "text":
		return bus.Text(s), nil
	case "json":
		var v any
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("the output is not JSON: %v", err)
		}
		if dec.More() {
			return nil, errors.New("the output is not JSON: more than one value")
		}
		var blocks []bus.Block
		bd := json.NewDecoder(strings.NewReader(s))
		bd.DisallowUnknownFields()
		if _, isArray := v.([]any); isArray && bd.Decode(&blocks) == nil && len(blocks) > 0 &&
			!slices.ContainsFunc(blocks, func(b bus.Block) bool { return b.Type == "" }) {
			return blocks, nil
		}
		b, _ := json.Marshal(v)
		return bus.Text(string(b)), nil
	}
	return nil, fmt.Errorf("format must be text or json, got %q", format)
}

func doneText(it Item, a Act) string {
	switch a.Action {
	case "allow":
		if len(a.Rules) > 0 {
			return fmt.Sprintf("allowed %s (%s) and remembered %d rule(s)", it.Tool, it.ID, len(a.Rules))
		}
		return fmt.Sprintf("allowed %s (%s)", it.Tool, it.ID)
	case "deny":
		return fmt.Sprintf("denied %s (%s)", it.Tool, it.ID)
	}
	return fmt.Sprintf("answered %s (%s)", it.Tool, it.ID)
}

// validKey reports whether key is <session>.<replyid>.<callid>.
func validKey(key string) bool {
	parts := strings.Split(key, ".")
	return len(parts) == 3 && bus.ValidID(parts[0]) && bus.ValidID(parts[1]) && bus.ValidID(parts[2])
}

// checkOutput checks an external answer against the tool's output_schema,
// if any (an unreadable definition is not checked: the router decides).
func (s *Server) checkOutput(ctx context.Context, tool string, a Act) error {
	if s.tools == nil {
		return nil
	}
	e, err := s.tools.Get(ctx, tool)
	if err != nil {
		return nil
	}
	var def bus.ToolDef
	if json.Unmarshal(e.Value(), &def) != nil || len(def.OutputSchema) == 0 {
		return nil
	}
	if a.Format != "json" {
		return fmt.Errorf("%s declares an output_schema: answer with JSON that matches it", tool)
	}
	sch, err := schemas.Compile(def.OutputSchema)
	if err != nil {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(a.Output))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("the output is not JSON: %v", err)
	}
	if problems := sch.Validate(v); len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Path + ": " + p.Message
		}
		return fmt.Errorf("the output does not match %s's output_schema: %s", tool, strings.Join(msgs, "; "))
	}
	return nil
}
