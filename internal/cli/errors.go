package cli

import (
	"context"
	"errors"
	"fmt"
)

// Exit codes, the same for every command so that scripts can branch on
// them. They are listed in the usage text and in docs/cli.md.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitError: the server refused or failed, or it could not be reached.
	ExitError = 1
	// ExitUsage: the command line was wrong.
	ExitUsage = 2
	// ExitAuth: no key, or the key is wrong, revoked or not allowed (HTTP 401/403).
	ExitAuth = 3
	// ExitNotFound: what was named does not exist (HTTP 404).
	ExitNotFound = 4
	// ExitTimeout: --timeout passed before the answer or the end.
	ExitTimeout = 5
	// ExitClarify: the question needs a clarification first (sylk ask).
	ExitClarify = 6
	// ExitFailed: the run or index operation watched ended failed or cancelled.
	ExitFailed = 7
	// ExitInterrupted: Ctrl-C.
	ExitInterrupted = 130
)

// Error is an error with the exit code it ends the command with.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &Error{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// errInterrupted is the cause of a context cancelled by Ctrl-C.
var errInterrupted = errors.New("interrupted")

// ctxError names why ctx ended: Ctrl-C or --timeout.
func ctxError(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), errInterrupted) {
		return &Error{Code: ExitInterrupted, Err: errInterrupted}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Code: ExitTimeout, Err: errors.New("timed out (raise --timeout to wait longer)")}
	}
	return &Error{Code: ExitInterrupted, Err: ctx.Err()}
}

// exitCode is err's exit code.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitError
}
