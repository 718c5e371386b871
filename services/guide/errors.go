package guide

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/guidesession"
)

// The Guide's errors. Each is an apierr.Error: a gRPC code and a stable
// reason (ErrorInfo) a client may branch on, with a message told for the
// case. Domain code returns them (or wraps them); every handler passes
// what it returns through apierr.Status, the one mapper, which also turns
// an unreachable database into UNAVAILABLE and anything unexpected into a
// logged INTERNAL.

// Reasons of the Guide's errors, besides apierr's shared ones and the
// <KIND>_NOT_FOUND of apierr.NotFound (SESSION_NOT_FOUND,
// PENDING_CLARIFICATION_NOT_FOUND, DEAD_LETTER_NOT_FOUND, ...).
const (
	// reasonSessionNotActive: the call needs an active session (sending a
	// message, replaying into it); a suspended one is resumed first.
	reasonSessionNotActive = "SESSION_NOT_ACTIVE"
	// reasonTransitionNotAllowed: the session's state does not allow the
	// lifecycle step asked (activate, suspend, resume, complete, fail,
	// switch to it); the metadata's "state" is the state it is in.
	reasonTransitionNotAllowed = "SESSION_TRANSITION_NOT_ALLOWED"
	// reasonSessionNotOpen: a suspended or finished session's context and
	// recordings do not change.
	reasonSessionNotOpen = "SESSION_NOT_OPEN"
	// reasonRecordingInProgress: the session is being recorded already.
	reasonRecordingInProgress = "RECORDING_IN_PROGRESS"
	// reasonReplayFinished: the replay stepped past its last query.
	reasonReplayFinished = "REPLAY_FINISHED"
	// reasonContextVersionMismatch: the context changed since it was read
	// (ABORTED: read it again).
	reasonContextVersionMismatch = "CONTEXT_VERSION_MISMATCH"
	// reasonReplayMovedOn: another step of the replay was taken meanwhile
	// (ABORTED: read it again).
	reasonReplayMovedOn = "REPLAY_MOVED_ON"
	// reasonRequestIDReused: a request id names another message.
	reasonRequestIDReused = "REQUEST_ID_REUSED"
	// reasonClassifierUnavailable: the message classifier does not answer.
	reasonClassifierUnavailable = "CLASSIFIER_UNAVAILABLE"
	// reasonDeadLetterUndeliverable: a dead letter names no agent to
	// deliver it to.
	reasonDeadLetterUndeliverable = "DEAD_LETTER_UNDELIVERABLE"
	// reasonSessionEnded: a completed or failed session does not change
	// (the reason the other services give through pkg/guidesession).
	reasonSessionEnded = guidesession.ReasonSessionEnded
	// reasonViewerReadOnly: the caller's role may read, not change.
	reasonViewerReadOnly = "VIEWER_READ_ONLY"
)

// errViewer refuses a viewer's change to a session.
var errViewer = apierr.New(codes.PermissionDenied, reasonViewerReadOnly, "viewers cannot change sessions")

// errSessionNotFound matches every SESSION_NOT_FOUND (errors.Is compares
// the code and reason).
var errSessionNotFound = apierr.NotFound("session", "")

// sessionNotFound says session id does not exist for the caller. Another
// tenant's or user's session is reported the same way, so that callers
// cannot probe for it.
func sessionNotFound(id string) error { return apierr.NotFound("session", sessionName(id)) }

// stateError says a session in state current cannot do action, naming the
// states it could from: "session is created; cannot suspend (allowed only
// from active)".
func stateError(reason, current, action string, allowed ...string) *apierr.Error {
	msg := fmt.Sprintf("session is %s; cannot %s", current, action)
	if len(allowed) > 0 {
		msg += fmt.Sprintf(" (allowed only from %s)", strings.Join(allowed, " or "))
	}
	return apierr.FailedPrecondition(reason, "%s", msg).With("state", current)
}

// sendStateError explains why a session takes no messages.
func sendStateError(state string) error {
	if state == stateSuspended {
		return apierr.FailedPrecondition(reasonSessionNotActive, "session is %s; resume it first", state).With("state", state)
	}
	return stateError(reasonSessionNotActive, state, "send messages to it")
}

// conflict says what was read changed before the write (ABORTED: read it
// again).
func conflict(reason, format string, args ...any) error {
	return apierr.New(codes.Aborted, reason, format, args...)
}

// errDuplicateRequest says a message with the same request id was stored
// concurrently; the caller replays the stored one. Clients never see it.
var errDuplicateRequest = errors.New("duplicate request id")

// commandReply is the message of err when a slash command answers with it
// (a session in the wrong state, one that does not exist) rather than
// failing.
func commandReply(err error) (string, bool) {
	var e *apierr.Error
	if errors.As(err, &e) && (e.Code == codes.FailedPrecondition || e.Code == codes.NotFound) {
		return e.Message, true
	}
	return "", false
}
