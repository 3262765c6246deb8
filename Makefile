# sandboxd — build, demo, tests, benchmarks.
# Everything runs as root on Debian bookworm (or a container of it); each
# target installs what it needs first.

GO        ?= go
BIN       := bin/sandboxd
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/sandboxd/sandboxd/internal/daemon.Version=$(VERSION)
# Privileged tests fail, never skip, when run through make.
export SANDBOXD_REQUIRE_PRIVILEGED := 1

.PHONY: all build demo test test-unit test-containers e2e attack bench bench-quick fuzz soak seccomp clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sandboxd

demo: build
	@scripts/deps.sh demo
	@scripts/demo.sh

test: build
	@scripts/deps.sh test
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e /test/attack -e /pkg/grade$$)
	@# pkg/grade's boundary tests and the escape suite alone: their attacks
	@# move, remove and plant /tests and /logs in the shared root
	@# filesystem, which other packages' tests grade into and read back
	@# (docs/failures.md#tests-that-move-the-shared-root-run-alone).
	$(GO) test -count=1 -timeout 20m ./pkg/grade/
	$(GO) test -count=1 -timeout 20m ./test/attack/
	$(MAKE) test-containers

# The sandbox tests again inside bullseye (bwrap 0.4.1) and bookworm (bwrap 0.8)
# containers with Docker's default capabilities
# (docs/failures.md#tests-run-under-docker-default-capabilities-too).
test-containers: build
	@scripts/container-tests.sh

e2e: build
	@scripts/deps.sh test
	$(GO) test -count=1 -timeout 40m -tags e2e ./test/e2e/...

# The escape suite on this machine (host mode; its shared-filesystem and race
# classes start containers of their own), then every class again with the
# daemon inside bullseye and bookworm containers (docs/security.md).
attack: build
	$(GO) test -count=1 -timeout 20m -run Escape ./...
	@scripts/container-tests.sh attack

bench: build
	$(GO) run ./test/bench -out docs/benchmarks.md

bench-quick: build
	$(GO) run ./test/bench -quick

# The long load run of issue 7: 10,000 sequential and 500 concurrent sessions.
soak: build
	SANDBOXD_SOAK=1 $(GO) test -count=1 -timeout 60m -tags soak -v ./test/load/

fuzz:
	scripts/fuzz.sh $${FUZZTIME:-10m}

# images/seccomp.json: moby/profiles/seccomp's default (the version go.mod
# requires) plus the sandbox's additions; a test fails when the file is not
# what this writes.
seccomp:
	$(GO) run ./images/seccompgen -o images/seccomp.json

clean:
	rm -rf bin
