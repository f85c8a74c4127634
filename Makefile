# kvshare — thin wrapper over CMake.  The README's two commands:
#   make bench   build, then run `kvshare bench` on embedded defaults
#   make test    build, then ctest over both variants (kernel and plain)
# Also: make build, make test-asan (ASan+UBSan), make test-tsan, make clean.
#   make fuzz    libFuzzer targets (fuzz/README.md): clang build in build-fuzz, each
#                target for FUZZ_SECONDS on a scratch copy of its committed corpus;
#                fails on any crash, hang, leak or sanitizer report
#   make fuzz-seeds  regenerate fuzz/corpus/ctl from real caches
#   make chaos   a long chaos run (CHAOS_MINUTES, default 10) per variant and mixed
#                (perf/chaos.sh; CTest runs a short one)
#   make startup-bench  pre-fault and first-load timings (perf/startup_bench.sh)
#
# Missing Debian packages are installed when run as root; otherwise the exact
# apt-get line is printed and make stops.

JOBS ?= $(shell nproc)
WERROR ?= ON
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure --timeout 600

DEB_PACKAGES := cmake gcc make pkg-config liburing-dev libnuma-dev libhugetlbfs-dev \
	libjansson-dev libhiredis-dev abigail-tools fio linux-perf

# What only the tests use: a real Redis server for the redis backend's tests,
# pytest, numpy and torch (CPU) for the Python binding's.  Installed by the test
# targets (as root), so the build and `make bench` stay small.
TEST_DEB_PACKAGES := redis-server python3-pytest python3-numpy python3-torch

# libFuzzer build: clang, compiler-rt (libFuzzer, ASan, UBSan runtimes), and
# llvm for llvm-symbolizer (readable stacks).  The plain variant needs no more.
FUZZ_DEB_PACKAGES := cmake make pkg-config clang libclang-rt-14-dev llvm libjansson-dev libhiredis-dev
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := ctl store_config trace block
FUZZ_ARGS ?=

.PHONY: all deps build bench test test-asan test-tsan fuzz fuzz-build fuzz-seeds chaos startup-bench clean

all: build

deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing:$$missing"; \
			(apt-get install -y --no-install-recommends $$missing || \
			 (apt-get update && apt-get install -y --no-install-recommends $$missing)) || exit 1; \
		else \
			echo "missing Debian packages; run as root:"; \
			echo "  apt-get install -y$$missing"; \
			exit 1; \
		fi; \
	fi

# $(1): build dir, $(2): extra cmake flags
define kvs_build
	cmake -S . -B $(1) -DKVS_WERROR=$(WERROR) $(2) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(1) -j $(JOBS)
endef

build: deps
	$(call kvs_build,build,)

bench: build
	build/bin/kvshare bench

test: build
	ctest --test-dir build $(CTEST_FLAGS) -j $(JOBS)

test-asan: deps
	$(call kvs_build,build-asan,-DKVS_SANITIZE=asan -DKVS_CUDA=OFF)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --test-dir build-asan $(CTEST_FLAGS) -j $(JOBS) -LE slow

test-tsan: deps
	$(call kvs_build,build-tsan,-DKVS_SANITIZE=tsan -DKVS_CUDA=OFF)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		ctest --test-dir build-tsan $(CTEST_FLAGS) -j $(JOBS) -LE slow

test test-asan test-tsan: DEB_PACKAGES += $(TEST_DEB_PACKAGES)
fuzz-build fuzz-seeds: DEB_PACKAGES := $(FUZZ_DEB_PACKAGES)
fuzz-build: deps
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=$(FUZZ_CC) -DKVS_FUZZ=ON -DKVS_VARIANT=plain \
		-DKVS_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS)) seed_ctl

# FUZZ_ARGS: more libFuzzer flags, e.g. '-fork=1 -ignore_crashes=1' to go on after a crash.
fuzz: fuzz-build
	FUZZ_ARGS='$(FUZZ_ARGS)' fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

CHAOS_MINUTES ?= 10
chaos: build
	perf/chaos.sh --minutes $(CHAOS_MINUTES) --build build

startup-bench: build
	perf/startup_bench.sh build

fuzz-seeds: fuzz-build
	rm -f fuzz/corpus/ctl/*
	build-fuzz/fuzz/seed_ctl fuzz/corpus/ctl

clean:
	rm -rf build build-asan build-tsan build-fuzz
