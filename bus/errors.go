package bus

import "fmt"

// Error is the data of an io.toolbus.error event and the Go error that stands
// for it. Two Errors match with errors.Is when their codes are equal, so
// callers test against the sentinels below:
//
//	if errors.Is(err, bus.ErrNotParked) { ... }
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is; their messages are empty.
var (
	ErrBadEvent        = &Error{Code: CodeBadEvent}
	ErrBadRequest      = &Error{Code: CodeBadRequest}
	ErrUnknownTool     = &Error{Code: CodeUnknownTool}
	ErrInactiveTool    = &Error{Code: CodeInactiveTool}
	ErrInvalidInput    = &Error{Code: CodeInvalidInput}
	ErrDenied          = &Error{Code: CodeDenied}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrTimeout         = &Error{Code: CodeTimeout}
	ErrToolError       = &Error{Code: CodeToolError}
	ErrUnknownOutcome  = &Error{Code: CodeUnknownOutcome}
	ErrInterrupted     = &Error{Code: CodeInterrupted}
	ErrNotParked       = &Error{Code: CodeNotParked}
	ErrAlreadyAnswered = &Error{Code: CodeAlreadyAnswered}
	ErrInternal        = &Error{Code: CodeInternal}
)
