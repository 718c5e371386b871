package guide

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

// Fields UpdateSession changes, as update_mask names them.
const (
	fieldDisplayName = "display_name"
	fieldRepository  = "repository"
	fieldConfig      = "config"
)

// sessionChange is what an update sets; nil fields stay as they are.
type sessionChange struct {
	displayName *string
	repository  *string
	config      *sessionConfig
}

// UpdateSession changes the fields update_mask names (display_name,
// repository, config; with no mask, those set in the request) of one of
// the caller's sessions that has not ended. A repository must be one
// registered in the caller's tenant, as the Librarian says ("" clears it);
// config replaces the whole configuration (unset fields take the
// defaults). Viewers change nothing.
func (s *Service) UpdateSession(ctx context.Context, req *guidev1.UpdateSessionRequest) (*guidev1.UpdateSessionResponse, error) {
	who, id, err := callerSession(ctx, "session.name", req.GetSession().GetName())
	if err != nil {
		return nil, err
	}
	if who.Role == identity.RoleViewer {
		return nil, apierr.Status(ctx, s.log, "update session", errViewer)
	}
	ch, err := s.readChange(ctx, who, req)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "update session", err)
	}
	var sess session
	var changed []string
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		sess, changed, err = s.applyChange(ctx, tx, ownerOf(who), id, ch)
		return err
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "update session", err)
	}
	s.afterChange(ctx, sess, changed, "user")
	return &guidev1.UpdateSessionResponse{Session: sess.proto()}, nil
}

// readChange checks an UpdateSession request and reads what it changes.
func (s *Service) readChange(ctx context.Context, who identity.Identity, req *guidev1.UpdateSessionRequest) (sessionChange, error) {
	in := req.GetSession()
	paths, err := updatePaths(req.GetUpdateMask(), in)
	if err != nil {
		return sessionChange{}, err
	}
	var ch sessionChange
	for _, p := range paths {
		switch p {
		case fieldDisplayName:
			name, err := s.displayName(in.GetDisplayName())
			if err != nil {
				return sessionChange{}, err
			}
			ch.displayName = &name
		case fieldRepository:
			repo, err := parseRepositoryName("session.repository", in.GetRepository())
			if err != nil {
				return sessionChange{}, err
			}
			if repo != "" {
				if _, err := s.getRepository(ctx, who, repo); err != nil {
					return sessionChange{}, err
				}
			}
			ch.repository = &repo
		case fieldConfig:
			cfg, err := s.sessionConfigFromProto(in.GetConfig())
			if err != nil {
				return sessionChange{}, err
			}
			ch.config = &cfg
		}
	}
	return ch, nil
}

// updatePaths reads an update mask: comma-separated field names (snake or
// lower camel case), or, when empty, the fields the session sets.
func updatePaths(mask string, in *guidev1.Session) ([]string, error) {
	var paths []string
	if strings.TrimSpace(mask) == "" {
		if in.GetDisplayName() != "" {
			paths = append(paths, fieldDisplayName)
		}
		if in.GetRepository() != "" {
			paths = append(paths, fieldRepository)
		}
		if in.GetConfig() != nil {
			paths = append(paths, fieldConfig)
		}
		if len(paths) == 0 {
			return nil, apierr.Invalid("update_mask", "the request changes nothing: set update_mask or a field to change")
		}
		return paths, nil
	}
	for _, p := range strings.Split(mask, ",") {
		switch strings.TrimSpace(p) {
		case fieldDisplayName, "displayName":
			p = fieldDisplayName
		case fieldRepository:
			p = fieldRepository
		case fieldConfig:
			p = fieldConfig
		default:
			return nil, apierr.Invalid("update_mask", "%q is not a field UpdateSession changes (want display_name, repository or config)", truncate(strings.TrimSpace(p), 60))
		}
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// displayName checks a session's display name.
func (s *Service) displayName(in string) (string, error) {
	name := strings.TrimSpace(in)
	if n := utf8.RuneCountInString(name); n > s.cfg.MaxDisplayNameChars {
		return "", apierr.Invalid("session.display_name", "%d characters exceeds the limit of %d", n, s.cfg.MaxDisplayNameChars)
	}
	if !utf8.ValidString(name) {
		return "", apierr.Invalid("session.display_name", "must be valid UTF-8")
	}
	return name, nil
}

// applyChange applies ch to session id of o in tx: the session is locked,
// must not have ended, and a repository set becomes the user's last one.
// It returns the session and the names of the fields that changed.
func (s *Service) applyChange(ctx context.Context, tx pgx.Tx, o owner, id string, ch sessionChange) (session, []string, error) {
	sess, err := getSession(ctx, tx, o, id, true)
	if err != nil {
		return session{}, nil, err
	}
	if sess.State == stateCompleted || sess.State == stateFailed {
		return session{}, nil, apierr.FailedPrecondition(reasonSessionEnded, "session %s is %s; it does not change", sessionName(id), sess.State).
			With("state", sess.State)
	}
	var changed []string
	if ch.displayName != nil && *ch.displayName != sess.DisplayName {
		sess.DisplayName = *ch.displayName
		changed = append(changed, fieldDisplayName)
	}
	if ch.repository != nil && *ch.repository != sess.Repository {
		sess.Repository = *ch.repository
		changed = append(changed, fieldRepository)
	}
	if ch.config != nil && *ch.config != sess.Config {
		sess.Config = *ch.config
		changed = append(changed, fieldConfig)
	}
	if len(changed) == 0 {
		return sess, nil, nil
	}
	sess.UpdateTime = s.now()
	if err := updateSessionFields(ctx, tx, sess); err != nil {
		return session{}, nil, err
	}
	if slices.Contains(changed, fieldRepository) && sess.Repository != "" {
		if err := rememberRepository(ctx, tx, o, sess.Repository, sess.UpdateTime); err != nil {
			return session{}, nil, err
		}
	}
	return sess, changed, nil
}

// afterChange records a committed change: the cached copy of the session
// is dropped and the session's stream told, with the repository it uses
// now. cause is "user" (the API) or "command" (chat).
func (s *Service) afterChange(ctx context.Context, sess session, changed []string, cause string) {
	if len(changed) == 0 {
		return
	}
	s.sessions.forget(sess.TenantID, sess.ID)
	s.log.InfoContext(ctx, "session updated", slog.String(logx.KeySessionID, sess.ID), slog.Any("fields", changed))
	text := fmt.Sprintf("Session %s changed its %s", sessionName(sess.ID), strings.ReplaceAll(strings.Join(changed, ", "), "_", " "))
	if slices.Contains(changed, fieldRepository) {
		text = fmt.Sprintf("Session %s no longer names a repository", sessionName(sess.ID))
		if sess.Repository != "" {
			text = fmt.Sprintf("Session %s now works on %s", sessionName(sess.ID), sess.Repository)
		}
	}
	s.publishSessionChange(ctx, sess, eventv1.EventType_EVENT_TYPE_SESSION_UPDATED, text, cause)
	if slices.Contains(changed, fieldRepository) {
		s.briefSession(ctx, sess, "repository") // briefing.go (spec E-09)
	}
}
