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

.PHONY: tools
tools: ## Install the pinned code generators and helm into .tools/bin
	@mkdir -p $(TOOLS_BIN)
	@test -x $(TOOLS_BIN)/buf || GOBIN=$(TOOLS_BIN) GOFLAGS= $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@test -x $(TOOLS_BIN)/protoc-gen-go || GOBIN=$(TOOLS_BIN) GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(TOOLS_BIN)/protoc-gen-go-grpc || GOBIN=$(TOOLS_BIN) GOFLAGS= $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@test -x $(TOOLS_BIN)/protoc-gen-grpc-gateway || GOBIN=$(TOOLS_BIN) GOFLAGS= $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
	@test -x $(TOOLS_BIN)/protoc-gen-openapiv2 || GOBIN=$(TOOLS_BIN) GOFLAGS= $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
	@test -x $(TOOLS_BIN)/helm || GOBIN=$(TOOLS_BIN) GOFLAGS= $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: proto
proto: ## Regenerate Go, gateway and OpenAPI code from proto/
	buf lint
	rm -rf gen/go && find gen/openapi -name '*.json' -delete
	buf generate

.PHONY: proto-lint
proto-lint: ## Lint the protos
	buf lint

.PHONY: proto-check
proto-check: ## Fail when the committed generated code is not what buf generates
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	  buf generate --template buf.gen.yaml -o $$tmp && \
	  diff -r $$tmp/gen/go gen/go && diff $$tmp/gen/openapi/sylk.swagger.json gen/openapi/sylk.swagger.json && \
	  echo "generated code is current"

.PHONY: build
build: ## Build every binary into bin/
	$(GO) build -trimpath -o bin/ ./cmd/...

.PHONY: fmt
fmt: ## Format the Go code
	gofmt -w $$(git ls-files '*.go' | grep -v '^gen/')

.PHONY: lint
lint: ## gofmt check and go vet over every module
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PACKAGES)

.PHONY: check
check: proto-lint proto-check lint ## Every static check CI runs

.PHONY: test
test: ## Unit, integration and e2e tests against the local Postgres, Redis and NATS (with -race)
	$(GO) test $(TEST_FLAGS) $(PACKAGES)

.PHONY: test-e2e
test-e2e: ## Only the end-to-end tests
	$(GO) test $(TEST_FLAGS) ./e2e/...

BENCH_FLAGS ?= -run '^$$' -bench . -benchtime=1x -timeout 30m -v

.PHONY: bench-guide
bench-guide: ## Routing throughput and p50/p99 per tier, beside raw NATS request-reply and gRPC echo
	$(GO) test $(BENCH_FLAGS) ./bench/guide/

.PHONY: bench-llm
bench-llm: ## The LLM gate's added latency and the Redis rate-limit and budget checks
	$(GO) test $(BENCH_FLAGS) ./bench/llm/

.PHONY: bench-librarian
bench-librarian: ## Index the Go standard library and report index/search speed and retrieval quality
	$(GO) test $(BENCH_FLAGS) ./bench/librarian/

.PHONY: bench-orchestrator
bench-orchestrator: ## A 10,000-node DAG: scheduling overhead per node and total time against the ideal
	$(GO) test $(BENCH_FLAGS) ./bench/orchestrator/

.PHONY: dev
dev: ## Run migrations and the whole mesh in one process (embedded NATS unless SYLK_NATS_URL is set)
	$(GO) build -o bin/ ./cmd/sylk ./cmd/sylk-task-init
	bin/sylk dev

.PHONY: migrate
migrate: ## Apply every schema's migrations to SYLK_POSTGRES_DSN
	$(GO) run ./cmd/sylk migrate

.PHONY: helm-lint
helm-lint: ## Lint and render the Helm chart
	helm lint deploy/helm/sylk
	helm template sylk deploy/helm/sylk > /dev/null

.PHONY: compose-up
compose-up: ## Start the stack with docker compose (needs a Docker engine)
	docker compose -f deploy/compose/docker-compose.yml up --build -d

.PHONY: compose-down
compose-down: ## Stop the docker compose stack
	docker compose -f deploy/compose/docker-compose.yml down

.PHONY: ci
ci: tools check test ## What CI runs
