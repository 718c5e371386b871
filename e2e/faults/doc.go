// Package faults is the fault suite (make test-faults): the mesh's
// Orchestrators and workers run as separate `sylk serve` processes against
// a PostgreSQL, Redis and NATS of each scenario's own; a scenario submits
// runs of task commands that record each start and end in a ledger, kills,
// stops or restarts one part mid-run, and counts from the ledger and the
// Orchestrator what was lost and what was executed twice. Its tests are behind the
// faults build tag, so that make test does not run them:
//
//	go test -tags faults -v -count=1 -timeout 20m ./e2e/faults/
package faults
