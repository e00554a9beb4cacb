# skbtrace: the blktrace of the network stack.
#   make demo   build, then record a loopback transfer and print its events
#   make test   every test: unit, fuzz seeds, generated-code check, kernel (root),
#               and the kernel matrix (make kernels)
#   make bench  performance targets, as ratios measured side by side

GO ?= go
BIN := bin/skbtrace
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/skbtrace/skbtrace/internal/collect.Version=$(VERSION)

.PHONY: all deps build generate check-generate test bench demo fuzz clean kernels

all: build

deps:
	@scripts/deps.sh

build: deps
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/skbtrace

generate: deps
	cd internal/probe && $(GO) generate ./...
	cd internal/lab && $(GO) generate ./...

check-generate: deps
	scripts/check-generated.sh

test: deps check-generate
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	$(MAKE) kernels

# -p 1: one package at a time, so that no benchmark shares the CPUs with another.
bench: build
	$(GO) test -p 1 -count=1 -run '^$$' -bench . -benchtime 1x -timeout 60m ./...

demo: build
	scripts/demo.sh $(BIN)

# Boots each of Debian's KERNELS under QEMU over this machine's root and runs
# scripts/kernels/guest.sh there; results in out/kernels/<version>/.
KERNELS ?= 5.10 6.1 6.12
kernels: build
	$(GO) test -c -o bin/e2e.test ./test/e2e
	scripts/kernels/matrix.sh $(KERNELS)

# Runs each fuzz target for FUZZTIME; new interesting inputs stay in the Go cache.
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./internal/trace -run '^$$' -fuzz FuzzReader -fuzztime $(FUZZTIME)
	$(GO) test ./internal/event -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	$(GO) test ./internal/trace -run '^$$' -fuzz FuzzMetaRecords -fuzztime $(FUZZTIME)
	$(GO) test ./internal/packet -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	$(GO) test ./internal/analyze/pcap -run '^$$' -fuzz FuzzCapture -fuzztime $(FUZZTIME)
	$(GO) test ./internal/agent -run '^$$' -fuzz FuzzEvidenceQuery -fuzztime $(FUZZTIME)
	$(GO) test ./internal/collect/pktfilter -run '^$$' -fuzz FuzzCompile -fuzztime $(FUZZTIME)

clean:
	rm -rf bin
