# PyBox. `make help` lists the targets.

SHELL := /bin/bash
GO ?= go
ARCH ?= x86_64
GOARCH_guest := $(if $(filter arm64,$(ARCH)),arm64,amd64)
# Worked out once (:=), so every recipe of one make run stamps the same
# version even if the tree changes meanwhile.
ifndef VERSION
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
endif
ifndef COMMIT
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
endif
export PYBOX_CACHE ?= $(HOME)/.cache/pybox
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/staticcheck)

BUILD := build/$(ARCH)
KERNEL_FILE := $(if $(filter arm64,$(ARCH)),Image,bzImage)
# make install: PREFIX/bin/pybox and PREFIX/lib/pybox/ARCH/, under DESTDIR
# when packaging.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR := $(DESTDIR)$(PREFIX)/bin
LIBDIR := $(DESTDIR)$(PREFIX)/lib/pybox/$(ARCH)
GUEST_FILES := $(KERNEL_FILE) initramfs.cpio manifest.json
HOST_LDFLAGS := -X pybox/host/version.Version=$(VERSION) -X pybox/host/version.Commit=$(COMMIT)
guest_ldflags = -s -w -buildid= -X pybox/guest/agent.Version=$(1) -X pybox/guest/agent.Commit=$(COMMIT)
# The Go files and what they embed (//go:embed: the warm box's launcher
# source, the compiled seccomp policies, the image recipes): a change to
# any of them rebuilds the binaries.
GO_SOURCES := $(shell find . \( -name '*.go' -o -name '*.c' -o -name '*.bpf' -o -path './host/image/recipes/*.json' \) \
	-not -path './build/*' -not -path '*/node_modules/*' -not -path '*/testdata/*' 2>/dev/null) go.mod go.sum

.PHONY: all pybox guest bench-guest kernel kernel-arm64 guest-arm64 manifest images install uninstall dist deps test test-arm64 arm64-smoke check typecheck-darwin sign fuzz bench demo clean help FORCE

all: pybox guest kernel manifest ## Build bin/pybox, the guest agent, its initramfs, the kernel and their manifest (default)

# The version is stamped into both binaries: they are built again when it
# changes (a commit), not only when a source file does, so the manifest's
# agent version is always the one inside the initramfs.
$(BUILD)/version.stamp: FORCE
	@mkdir -p $(@D); echo '$(VERSION) $(COMMIT)' | cmp -s - $@ || echo '$(VERSION) $(COMMIT)' > $@

pybox: bin/pybox ## Build the host CLI, bin/pybox
bin/pybox: $(GO_SOURCES) $(BUILD)/version.stamp
	$(GO) build -trimpath -ldflags '$(HOST_LDFLAGS)' -o $@ ./cmd/pybox

guest: $(BUILD)/initramfs.cpio ## Build the static guest agent and the initramfs holding it as /init
$(BUILD)/pybox-guest: $(GO_SOURCES) $(BUILD)/version.stamp
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_guest) $(GO) build -trimpath -ldflags '$(call guest_ldflags,$(VERSION))' -o $@ ./cmd/pybox-guest
$(BUILD)/initramfs.cpio: $(BUILD)/pybox-guest
	$(GO) run ./initramfs/mkinitramfs -o $@ $<

# The benchmark build of the agent can switch a box's posture check and
# seccomp filter off (guest/box/seal_bench.go), for `make bench` only. It
# lives apart, in build/<arch>/bench/, and says "-bench" in its version.
bench-guest: $(BUILD)/bench/initramfs.cpio ## Build the benchmark-only agent and initramfs (make bench uses it; never shipped)
$(BUILD)/bench/pybox-guest: $(GO_SOURCES) $(BUILD)/version.stamp
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_guest) $(GO) build -tags pyboxbench -trimpath -ldflags '$(call guest_ldflags,$(VERSION)-bench)' -o $@ ./cmd/pybox-guest
$(BUILD)/bench/initramfs.cpio: $(BUILD)/bench/pybox-guest
	$(GO) run ./initramfs/mkinitramfs -o $@ $<

kernel: ## Build the guest kernel (cached in $PYBOX_CACHE; ~9 min the first time on 2 cores)
	scripts/build-kernel.sh $(ARCH) $(BUILD)/$(if $(filter arm64,$(ARCH)),Image,bzImage)

kernel-arm64: ## Build the arm64 guest kernel for macOS (needs gcc-aarch64-linux-gnu)
	$(MAKE) kernel ARCH=arm64

guest-arm64: ## Cross-build the arm64 guest agent and initramfs
	$(MAKE) guest ARCH=arm64

# manifest.json records the guest files' sha256 and the agent's version,
# for `pybox version` and for the warning about a VM that runs an older agent.
manifest: guest kernel ## Write build/ARCH/manifest.json for the kernel and initramfs
	$(GO) run ./host/guestfiles/mkmanifest -arch $(ARCH) -version '$(VERSION)' -commit '$(COMMIT)' $(BUILD)

install: ## Install bin/pybox and its guest files into $(DESTDIR)$(PREFIX) (default /usr/local); run `make` first
	@for f in bin/pybox $(addprefix $(BUILD)/,$(GUEST_FILES)); do \
	  [ -f $$f ] || { echo "make install: no $$f: run \`make\` first (as yourself, not root), then \`make install\`" >&2; exit 1; }; done
	install -d $(BINDIR) $(LIBDIR)
	install -m 0755 bin/pybox $(BINDIR)/pybox
	install -m 0644 $(addprefix $(BUILD)/,$(GUEST_FILES)) $(LIBDIR)/

uninstall: ## Remove exactly what `make install` installed (give the same PREFIX and DESTDIR)
	rm -f $(BINDIR)/pybox $(addprefix $(LIBDIR)/,$(GUEST_FILES))
	rmdir $(LIBDIR) $(DESTDIR)$(PREFIX)/lib/pybox 2>/dev/null || true

dist: all images ## Build the release bundle dist/pybox-VERSION-linux-ARCH.tar.gz (reproducible)
	scripts/dist.sh '$(VERSION)' '$(COMMIT)' $(ARCH)

images: bin/pybox ## Build the built-in images stdlib and data for ARCH (cached in $PYBOX_CACHE; arm64 on x86-64 runs under qemu-user)
	bin/pybox image build stdlib --arch $(ARCH)
	bin/pybox image build data --arch $(ARCH)

deps: ## Install every distribution package the build and tests need (Debian 12, as root)
	scripts/deps.sh

test: all images bench-guest $(if $(filter x86_64,$(ARCH)),arm64-smoke) ## Run every test: unit, fuzz seeds, and end to end against the real VM
	scripts/test.sh

# make test boots the arm64 guest once too (TestArm64Guest): its kernel,
# initramfs and stdlib image, about 20 minutes the first time on 2 cores,
# then cached. An image that cannot be built here (no qemu-user with
# binfmt_misc) makes that test say what is missing.
arm64-smoke: bin/pybox
	$(MAKE) ARCH=arm64 all
	bin/pybox image build stdlib --arch arm64 || echo "make: no arm64 stdlib image (see above): TestArm64Guest will say what is missing" >&2

# The arm64 guest (the Mac's) emulated by QEMU under TCG: the kernel, the
# initramfs, the bench agent and both images for arm64 (about 10 + 35
# minutes the first time on 2 cores, then cached), then the end-to-end
# suite against it.
test-arm64: ## Run the end-to-end suite against the arm64 guest under QEMU's emulation (slow; not part of make test)
	$(MAKE) ARCH=arm64 all images bench-guest
	PYBOX_E2E_ARCH=arm64 E2E_TIMEOUT=$(or $(E2E_TIMEOUT),150m) scripts/test.sh e2e

check: typecheck-darwin ## gofmt, go vet, staticcheck and the darwin type check
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

typecheck-darwin: ## Type-check the darwin build of host/ and cmd/pybox against vz v3.7.1 (runs on Linux)
	$(GO) test -count=1 ./host/internal/typecheck
	$(GO) test -count=1 -run Darwin ./host/vm

sign: bin/pybox ## macOS: sign bin/pybox ad hoc with the virtualization entitlement (Virtualization.framework needs it)
	codesign --force --entitlements scripts/macos/pybox.entitlements -s - bin/pybox

fuzz: ## Run every fuzz target for a while (FUZZTIME=60s each)
	scripts/fuzz.sh $(or $(FUZZTIME),60s)

bench: all images bench-guest ## Benchmarks: medians and ratios, written to build/bench/ (also boots the arm64 guest: make ARCH=arm64 and its stdlib image, ~20 min the first time; and the relay's baseline, built once by scripts/bench-before.sh)
	$(if $(filter arm64,$(ARCH)),,$(MAKE) ARCH=arm64 all && bin/pybox image build stdlib --arch arm64)
	BENCH_INITRAMFS=$(abspath $(BUILD)/bench/initramfs.cpio) scripts/bench.sh

demo: all images ## Start the VM and run a real example through `pybox run`
	scripts/demo.sh

clean: ## Remove bin/, build/ and dist/ (the caches in $PYBOX_CACHE stay)
	rm -rf bin build dist

help: ## Show this help
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'
