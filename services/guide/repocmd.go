package guide

import (
	"context"
	"errors"
	"fmt"
	"strings"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
)

// /repo lists the tenant's repositories and says which one the session
// works on; /repo <name> makes the session work on the repository of that
// display name, id or "repositories/<id>" (repository.go).

const repoUsage = "/repo [name]"

// maxReposListed bounds the repositories /repo lists.
const maxReposListed = 50

func (s *Service) repoCommand(ctx context.Context, env *commandEnv, arg string) (commandResult, error) {
	if s.librarian == nil {
		return commandResult{reply: "The librarian is not configured, so there are no repositories to choose from."}, nil
	}
	if arg == "" {
		return s.repoListReply(ctx, env)
	}
	if env.who.Role == identity.RoleViewer {
		return commandResult{reply: "Viewers cannot change a session."}, nil
	}
	repo, reply, err := s.findRepository(ctx, env.who, arg)
	if err != nil || reply != "" {
		return commandResult{reply: reply}, err
	}
	sess, changed, err := s.applyChange(ctx, env.q, env.owner, env.session.ID, sessionChange{repository: &repo})
	if err != nil {
		return commandResult{}, err
	}
	if len(changed) == 0 {
		return commandResult{reply: fmt.Sprintf("This session already works on %s.", repoLabel(repo, arg))}, nil
	}
	return commandResult{
		reply: fmt.Sprintf("This session now works on %s.", repoLabel(repo, arg)),
		after: []func(context.Context){func(ctx context.Context) { s.afterChange(ctx, sess, changed, "command") }},
	}, nil
}

// findRepository resolves what the user typed to one of the tenant's
// repositories: a name or id is looked up, anything else matched with the
// display names (case aside). A repository that is not found, or a display
// name several share, is told in reply instead.
func (s *Service) findRepository(ctx context.Context, who identity.Identity, arg string) (name, reply string, err error) {
	if id := strings.TrimPrefix(arg, repositoriesCollection); ids.Valid(id) {
		name = repositoriesCollection + strings.ToLower(id)
		_, err := s.getRepository(ctx, who, name)
		if errors.Is(err, apierr.NotFound("repository", name)) {
			return "", fmt.Sprintf("Your tenant has no repository %s; /repo lists them.", name), nil
		}
		if err := s.peerReply(err, &reply); err != nil || reply != "" {
			return "", reply, err
		}
		return name, "", nil
	}
	all, err := s.listRepositories(ctx, who)
	if err := s.peerReply(err, &reply); err != nil || reply != "" {
		return "", reply, err
	}
	var found []*librarianv1.Repository
	for _, r := range all {
		if strings.EqualFold(r.GetDisplayName(), arg) {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Sprintf("Your tenant has no repository named %q; /repo lists them.", truncate(arg, 100)), nil
	case 1:
		return found[0].GetName(), "", nil
	}
	names := make([]string, len(found))
	for i, r := range found {
		names[i] = r.GetName()
	}
	return "", fmt.Sprintf("%d repositories are named %q: %s. Choose one with /repo <repositories/id>.",
		len(found), truncate(arg, 100), strings.Join(names, ", ")), nil
}

// peerReply turns the Librarian not answering into a reply to the user;
// other errors stay errors.
func (s *Service) peerReply(err error, reply *string) error {
	if apierr.Reason(err) == apierr.ReasonPeerUnavailable {
		*reply = "The librarian did not answer; try /repo again shortly."
		return nil
	}
	return err
}

func (s *Service) repoListReply(ctx context.Context, env *commandEnv) (commandResult, error) {
	var reply string
	all, err := s.listRepositories(ctx, env.who)
	if err := s.peerReply(err, &reply); err != nil || reply != "" {
		return commandResult{reply: reply}, err
	}
	current := env.session.Repository
	var b strings.Builder
	switch {
	case len(all) == 0:
		b.WriteString("Your tenant has no repositories; register one with POST /v1/repositories.")
	default:
		b.WriteString("Your tenant's repositories:")
		for i, r := range all {
			if i == maxReposListed {
				fmt.Fprintf(&b, "\n  ... and %d more (GET /v1/repositories)", len(all)-i)
				break
			}
			mark := " "
			if r.GetName() == current {
				mark = "*"
			}
			fmt.Fprintf(&b, "\n%s %s  %q", mark, r.GetName(), r.GetDisplayName())
		}
	}
	if current == "" {
		b.WriteString("\nThis session works on no repository; choose one with /repo <name>.")
	} else {
		fmt.Fprintf(&b, "\nThis session works on %s (*).", current)
	}
	return commandResult{reply: b.String()}, nil
}

// repoLabel names a repository for a reply: its name, and what the user
// called it when that was its display name.
func repoLabel(name, typed string) string {
	if strings.Contains(typed, name) || strings.EqualFold(typed, strings.TrimPrefix(name, repositoriesCollection)) {
		return name
	}
	return fmt.Sprintf("%s (%q)", name, truncate(typed, 100))
}
