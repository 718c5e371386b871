# Sylk: `make dev` runs the whole mesh locally, `make test` tests it.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
TOOLS_BIN := $(CURDIR)/.tools/bin
export PATH := $(TOOLS_BIN):$(PATH)

# Pinned tool versions.
BUF_VERSION                := v1.50.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPC_GATEWAY_VERSION       := v2.32.0
HELM_VERSION               := v3.17.3

# Every module of the workspace (a root-level ./... covers only the root module).
MODULES  = $(shell $(GO) list -m -f '{{.Dir}}')
PACKAGES = $(addsuffix /...,$(MODULES))
TEST_FLAGS ?= -race -count=1 -shuffle=on -timeout 15m

.PHONY: help
help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

# Each tool is a file in .tools/bin: a target that needs one depends on it,
# so it is installed the first time it is needed (`make tools` installs all).
BUF       := $(TOOLS_BIN)/buf
HELM      := $(TOOLS_BIN)/helm
GENERATORS = $(BUF) $(addprefix $(TOOLS_BIN)/,protoc-gen-go protoc-gen-go-grpc protoc-gen-grpc-gateway protoc-gen-openapiv2)
GO_INSTALL = mkdir -p $(TOOLS_BIN) && GOBIN=$(TOOLS_BIN) GOFLAGS= $(GO) install

.PHONY: tools
tools: $(GENERATORS) $(HELM) ## Install the pinned code generators and helm into .tools/bin

$(BUF):
	$(GO_INSTALL) github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS_BIN)/protoc-gen-go:
	$(GO_INSTALL) google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS_BIN)/protoc-gen-go-grpc:
	$(GO_INSTALL) google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLS_BIN)/protoc-gen-grpc-gateway:
	$(GO_INSTALL) github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
$(TOOLS_BIN)/protoc-gen-openapiv2:
	$(GO_INSTALL) github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
$(HELM):
	$(GO_INSTALL) helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: proto
proto: $(GENERATORS) ## Regenerate Go, gateway and OpenAPI code from proto/
	buf lint
	rm -rf gen/go && find gen/openapi -name '*.json' -delete
	buf generate

.PHONY: proto-lint
proto-lint: $(BUF) ## Lint the protos
	buf lint

.PHONY: proto-check
proto-check: $(GENERATORS) ## Fail when the committed generated code is not what buf generates
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	  buf generate --template buf.gen.yaml -o $$tmp && \
	  diff -r $$tmp/gen/go gen/go && diff $$tmp/gen/openapi/sylk.swagger.json gen/openapi/sylk.swagger.json && \
	  echo "generated code is current"

# The commit proto-breaking compares the protos with; empty skips the check
# (for a change that breaks them on purpose, before v1 is frozen).
BREAKING_AGAINST ?= HEAD~1

# proto-breaking compares with the protos as they were in BREAKING_AGAINST,
# taken out of git into a directory, so that it needs only that commit: a
# shallow clone without it fetches one more commit of history, and a
# repository whose first commit this is, or whose earlier commit has no
# protos, has nothing to compare with. The vendored third-party protos are
# not checked (buf.yaml ignores their module; --exclude-imports keeps them
# out as imports of ours).
.PHONY: proto-breaking
proto-breaking: $(BUF) ## Fail when a proto change breaks compatibility with BREAKING_AGAINST (default HEAD~1)
	@set -e; against='$(BREAKING_AGAINST)'; \
	if [ -z "$$against" ]; then echo "proto-breaking: skipped (BREAKING_AGAINST is empty)"; exit 0; fi; \
	if ! git rev-parse -q --verify "$$against^{commit}" >/dev/null && [ "$$(git rev-parse --is-shallow-repository)" = true ]; then \
	  git fetch -q --deepen=1 origin "$$(git rev-parse HEAD)" 2>/dev/null || git fetch -q --deepen=1 || true; \
	fi; \
	if ! commit=$$(git rev-parse -q --verify "$$against^{commit}"); then \
	  if [ "$$against" = HEAD~1 ] && [ "$$(git rev-parse --is-shallow-repository)" = false ]; then \
	    echo "proto-breaking: HEAD is the first commit; nothing to compare with"; exit 0; fi; \
	  echo "proto-breaking: commit $$against is not in this clone and could not be fetched (clone with --depth=2 or more, or set BREAKING_AGAINST)" >&2; exit 1; \
	fi; \
	if ! git cat-file -e "$$commit:buf.yaml" 2>/dev/null; then echo "proto-breaking: $$against has no protos; nothing to compare with"; exit 0; fi; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git archive "$$commit" buf.yaml proto | tar -x -C "$$tmp"; \
	buf breaking --exclude-imports --against "$$tmp"; \
	echo "protos compatible with $$against ($$(git rev-parse --short "$$commit"))"

.PHONY: build
build: ## Build every binary into bin/
	$(GO) build -trimpath -o bin/ ./cmd/...

.PHONY: fmt
fmt: ## Format the Go code
	gofmt -w $$(git ls-files '*.go' | grep -v '^gen/')

.PHONY: lint
lint: ## gofmt check, go vet over every module, and the import rules (internal/archtest)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PACKAGES)
	$(GO) test -count=1 ./internal/archtest/

# The OpenAPI documents the gateway serves (2.0 and 3), linted with the pinned CLI of
# tools/openapi-lint (its rules in tools/openapi-lint/redocly.yaml); TypeScript types
# generated from the OpenAPI 3 one must compile in strict mode.
.PHONY: openapi-lint
openapi-lint: ## Lint the served OpenAPI documents, 2.0 and 3 (needs node and npm)
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	  npm ci --prefix tools/openapi-lint --no-audit --no-fund --loglevel=error && \
	  $(GO) run ./internal/tools/openapidump -o $$tmp/openapi.json && \
	  $(GO) run ./internal/tools/openapidump -v3 -o $$tmp/openapi.v3.json && \
	  npx --prefix tools/openapi-lint redocly lint --config tools/openapi-lint/redocly.yaml \
	    $$tmp/openapi.json $$tmp/openapi.v3.json && \
	  npx --prefix tools/openapi-lint openapi-typescript $$tmp/openapi.v3.json -o $$tmp/api.d.ts && \
	  npx --prefix tools/openapi-lint tsc --strict --noEmit $$tmp/api.d.ts && \
	  echo "openapi-lint: TypeScript types generated from /openapi.v3.json compile with tsc --strict"

.PHONY: check
check: proto-lint proto-check proto-breaking lint openapi-lint ## Every static check CI runs

# The console (web/console) is TypeScript built with vite; its types come
# from the OpenAPI document the gateway serves, so a contract change that
# breaks it breaks this build. The built files (dist/) and the generated
# types are committed: go build needs no node.
CONSOLE_DIR = web/console

.PHONY: console-deps
console-deps: ## Install the console's pinned npm packages (package-lock.json)
	cd $(CONSOLE_DIR) && npm ci --no-audit --no-fund

.PHONY: console
console: console-deps ## Build the console: types from the OpenAPI document, strict type check, bundle into web/console/dist
	mkdir -p $(CONSOLE_DIR)/build
	$(GO) run ./internal/tools/openapidump -v3 -o $(CONSOLE_DIR)/build/openapi3.json
	cd $(CONSOLE_DIR) && npm run --silent gen && npm run --silent build

.PHONY: console-check
console-check: console ## Fail when the committed console types or dist/ are not what make console builds
	@if ! git diff --exit-code --stat -- $(CONSOLE_DIR)/src/api.gen.ts $(CONSOLE_DIR)/dist || \
	    [ -n "$$(git status --porcelain -- $(CONSOLE_DIR)/dist $(CONSOLE_DIR)/src/api.gen.ts)" ]; then \
	  echo "the committed console is not current: run make console and commit web/console"; exit 1; fi
	@echo "console is current"

# The deploy tests render the Helm chart with helm.
.PHONY: test
test: $(HELM) ## Unit, integration and e2e tests against the local Postgres, Redis and NATS (with -race)
	$(GO) test $(TEST_FLAGS) $(PACKAGES)

.PHONY: test-e2e
test-e2e: ## Only the end-to-end tests
	$(GO) test $(TEST_FLAGS) ./e2e/...

# The fault suite (e2e/faults, behind the faults build tag): orchestrators and workers as
# separate processes against a PostgreSQL, Redis and NATS of each scenario's own (it needs
# initdb/pg_ctl, redis-server and nats-server), killed, stopped and restarted mid-run.
.PHONY: test-faults
test-faults: ## Fault suite: kill/restart services and stores mid-run, print lost and twice-executed tasks per scenario
	$(GO) test -tags faults -count=1 -v -timeout 20m ./e2e/faults/

BENCH_FLAGS ?= -run '^$$' -bench . -benchtime=1x -timeout 30m -v

.PHONY: bench-guide
bench-guide: ## Routing throughput and p50/p99 per tier, beside raw NATS request-reply and gRPC echo
	$(GO) test $(BENCH_FLAGS) ./bench/guide/

.PHONY: bench-routing
bench-routing: ## The offline router on its labelled set (k-fold): accuracy per agent, confusions, clarifications, against the keyword rules
	$(GO) test $(BENCH_FLAGS) ./bench/routing/

.PHONY: bench-llm
bench-llm: ## The LLM gate's added latency and the Redis rate-limit and budget checks
	$(GO) test $(BENCH_FLAGS) ./bench/llm/

.PHONY: bench-librarian
bench-librarian: ## Index the Go standard library and report index/search speed and retrieval quality
	$(GO) test $(BENCH_FLAGS) ./bench/librarian/

.PHONY: bench-retrieval
bench-retrieval: ## Ranking quality on hand-judged questions (pgx and a few standard library packages): MRR@10, R@1, R@10 per query kind and mode
	$(GO) test $(BENCH_FLAGS) ./bench/retrieval/

.PHONY: bench-orchestrator
bench-orchestrator: ## A 10,000-node DAG: scheduling overhead per node and total time against the ideal
	$(GO) test $(BENCH_FLAGS) ./bench/orchestrator/

.PHONY: bench-agent
bench-agent: ## The Engineer's loop: its own overhead per tool call, without the model's or the commands' time
	$(GO) test -run '^$$' -bench 'LoopOverheadPerToolCall|AgentToolCallOverhead' -benchtime 20x -v ./pkg/agent/ ./services/worker/

# The coding-agent evaluation (docs/agent-eval.md). eval-agent reads its model from SYLK_EVAL_PROVIDER
# (openai or anthropic), SYLK_EVAL_BASE_URL, SYLK_EVAL_MODEL and SYLK_EVAL_API_KEY; EVAL_FLAGS adds flags
# (-tasks 'go-*', -parallel 2, -baseline-only...). Both start the mesh in-process on the local stores.
EVAL_FLAGS ?=

.PHONY: eval-agent
eval-agent: ## Every agent-evaluation task through the mesh and the bash-only baseline, against the SYLK_EVAL_* model
	$(GO) build -o bin/ ./eval/agent/cmd/eval-agent ./cmd/sylk-task-init
	bin/eval-agent $(EVAL_FLAGS)

.PHONY: eval-agent-smoke
eval-agent-smoke: ## The agent evaluation's smoke subset, played by the scripted model (must solve every task)
	$(GO) build -o bin/ ./eval/agent/cmd/eval-agent ./cmd/sylk-task-init
	bin/eval-agent -smoke $(EVAL_FLAGS)

.PHONY: dev
dev: ## Run migrations and the whole mesh in one process (embedded NATS unless SYLK_NATS_URL is set)
	$(GO) build -o bin/ ./cmd/sylk ./cmd/sylk-task-init
	bin/sylk dev

.PHONY: migrate
migrate: ## Apply every schema's migrations to SYLK_POSTGRES_DSN
	$(GO) run ./cmd/sylk migrate

# The chart generates no key: lint and render it with throwaway ones.
HELM_LINT_KEYS = --set auth.bootstrapKey=sylk_lint_only_$$(printf '%032d' 0) --set internal.key=lint_only_$$(printf '%032d' 0)
.PHONY: helm-lint
helm-lint: $(HELM) ## Lint and render the Helm chart
	$(HELM) lint --strict deploy/helm/sylk $(HELM_LINT_KEYS)
	$(HELM) template sylk deploy/helm/sylk $(HELM_LINT_KEYS) > /dev/null

.PHONY: compose-up
compose-up: ## Start the stack with docker compose (needs a Docker engine)
	docker compose -f deploy/compose/docker-compose.yml up --build -d

.PHONY: compose-down
compose-down: ## Stop the docker compose stack
	docker compose -f deploy/compose/docker-compose.yml down

.PHONY: ci
ci: tools check test ## What CI runs
