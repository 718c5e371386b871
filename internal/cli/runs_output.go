package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

// runRunsDecisions prints a run's decision log: each task's report.
func runRunsDecisions(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs decisions", "RUN [flags]",
		"Prints a run's decision log: each task's structured report (what it did, tested, decided);\n"+
			"a retry shows the briefing it was given.")
	pos, err := parseN(fs, args, 1, "a run")
	if err != nil {
		return err
	}
	var resp orchestratorv1.ListDecisionsResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/"+runName(pos[0])+"/decisions", nil, &resp); done {
		return err
	}
	fmt.Fprint(e.out, ensureNewline(firstNonEmpty(resp.GetLog(), "No decisions recorded.")))
	return nil
}

// runRunsBundle downloads a delivered run's branch as a git bundle, or
// prints its patch.
func runRunsBundle(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk runs bundle", "RUN (-o FILE | --patch) [flags]",
		"Downloads a delivered run's branch as a git bundle (then: git fetch FILE sylk/<run>:sylk/<run>),\n"+
			"or prints its patch with --patch.")
	out := fs.String("o", "", "write the bundle to this file")
	patch := fs.Bool("patch", false, "print the patch instead")
	pos, err := parseN(fs, args, 1, "a run")
	if err != nil {
		return err
	}
	if (*out == "") == !*patch {
		fs.Usage()
		return usageErrorf("sylk runs bundle needs -o FILE or --patch")
	}
	var resp orchestratorv1.GetRunBundleResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/"+runName(pos[0])+"/bundle", nil, &resp); done {
		return err
	}
	if *patch {
		fmt.Fprint(e.out, resp.GetPatch())
		return nil
	}
	if err := os.WriteFile(*out, resp.GetBundle(), 0o644); err != nil {
		return fmt.Errorf("write the bundle: %w", err)
	}
	fmt.Fprintf(e.out, "Wrote %s (branch %s, on %s): git fetch %s %s:%s\n", *out, resp.GetBranch(), resp.GetBaseCommit(), *out, resp.GetBranch(), resp.GetBranch())
	return nil
}
