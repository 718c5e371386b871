// Command eval-agent runs the coding-agent evaluation: each fixture task
// through the mesh and through a bash-only baseline, against one model,
// side by side (docs/agent-eval.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	agenteval "sylk.dev/sylk/eval/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := agenteval.Command(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}
