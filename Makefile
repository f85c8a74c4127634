# kvshare — thin wrapper over CMake.  The README's two commands:
#   make bench   build, then run `kvshare bench` on embedded defaults
#   make test    build, then ctest over both variants (kernel and plain)
# Also: make build, make test-asan (ASan+UBSan), make test-tsan, make clean.
#   make fuzz    libFuzzer targets (fuzz/README.md): clang build in build-fuzz, each
#                target for FUZZ_SECONDS on a scratch copy of its committed corpus;
#                fails on any crash, hang, leak or sanitizer report
#   make fuzz-seeds  regenerate fuzz/corpus/ctl from real caches
#   make model-check  Spin on model/dump.pml, the dump protocol, and model/pin.pml, the
#                lock-free READY pin of core/pin.c (model/check.sh):
#                every configuration exhaustively, every planted mutant refuted
#   make chaos   a long chaos run (CHAOS_MINUTES, default 10) per variant and mixed
#                (perf/chaos.sh; CTest runs a short one)
#   make startup-bench  pre-fault and first-load timings (perf/startup_bench.sh)
#   make wheel   the Python wheel with the library inside (build/wheel/)
#   make deb     the Debian packages (cmake/deb.sh: a build without tests in build-deb,
#                packages in build-deb/packages/)
#   make vllm-env  the pinned vLLM CPU venv, outside the repository, reused when
#                present (python/vllm-env/env.sh; docs/vllm.md)
#
# Missing Debian packages are installed when run as root; otherwise the exact
# apt-get line is printed and make stops.

JOBS ?= $(shell nproc)
WERROR ?= ON
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure --timeout 600

# What the libraries and the CLI need to build: all `make bench` installs.
DEB_PACKAGES := cmake gcc make pkg-config liburing-dev libnuma-dev libhugetlbfs-dev \
	libjansson-dev libhiredis-dev

# What cpack and cmake/deb.sh use: dpkg-shlibdeps and dpkg-buildflags, file.
PACKAGING_DEB_PACKAGES := dpkg-dev file

# What only the tests use: a real Redis server for the redis backend's tests,
# pytest, numpy and torch (CPU) for the Python binding's, abidiff for the ABI
# test, venv, setuptools and wheel for the wheel's, lintian for the deb test's.
# Installed by the test targets (as root), so `make bench` stays small.
TEST_DEB_PACKAGES := redis-server python3-pytest python3-numpy python3-torch abigail-tools \
	python3-venv python3-setuptools python3-wheel lintian $(PACKAGING_DEB_PACKAGES)

# What make model-check uses: Spin and a C compiler for its verifier.
MODEL_DEB_PACKAGES := spin gcc

# What the perf/ scripts use beside the build (fio, perf stat).
PERF_DEB_PACKAGES := fio linux-perf

# libFuzzer build: clang, compiler-rt (libFuzzer, ASan, UBSan runtimes), and
# llvm for llvm-symbolizer (readable stacks).  The plain variant needs no more.
FUZZ_DEB_PACKAGES := cmake make pkg-config clang libclang-rt-14-dev llvm libjansson-dev libhiredis-dev
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := ctl store_config trace block
FUZZ_ARGS ?=

.PHONY: all deps build bench test test-asan test-tsan fuzz fuzz-build fuzz-seeds chaos startup-bench vllm-env wheel deb model-check clean

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

# Only the CLI and the libraries it runs (both variants: bench re-executes itself
# against the other), quietly: the build's output is shown only when it fails.
bench: deps
	@log=$$(mktemp /tmp/kvshare-bench-build.XXXXXX); \
	if cmake -S . -B build -DKVS_WERROR=$(WERROR) $(CMAKE_FLAGS) >$$log 2>&1 && \
	   cmake --build build -j $(JOBS) --target bench_build >>$$log 2>&1; then \
		rm -f $$log; \
	else \
		tail -n 60 $$log; echo "make bench: the build failed (whole log: $$log)"; exit 1; \
	fi
	build/bin/kvshare bench

# Each ends with the list of skipped tests and sub-cases, with their reasons.
test: build
	@rc=0; ctest --test-dir build $(CTEST_FLAGS) -j $(JOBS) || rc=$$?; \
	tests/skips.sh build; exit $$rc

test-asan: deps
	$(call kvs_build,build-asan,-DKVS_SANITIZE=asan -DKVS_CUDA=OFF)
	@rc=0; ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --test-dir build-asan $(CTEST_FLAGS) -j $(JOBS) -LE 'slow|perf' || rc=$$?; \
	tests/skips.sh build-asan; exit $$rc

test-tsan: deps
	$(call kvs_build,build-tsan,-DKVS_SANITIZE=tsan -DKVS_CUDA=OFF)
	@rc=0; TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		ctest --test-dir build-tsan $(CTEST_FLAGS) -j $(JOBS) -LE 'slow|perf' || rc=$$?; \
	tests/skips.sh build-tsan; exit $$rc

test test-asan test-tsan: DEB_PACKAGES += $(TEST_DEB_PACKAGES)
deb: DEB_PACKAGES += $(PACKAGING_DEB_PACKAGES)
startup-bench: DEB_PACKAGES += $(PERF_DEB_PACKAGES)
model-check: DEB_PACKAGES := $(MODEL_DEB_PACKAGES)
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

# The protocols' models (docs/store.md, "Dumps", "What a hit costs"): no build of the library.
model-check: deps
	model/check.sh

startup-bench: build
	perf/startup_bench.sh build

fuzz-seeds: fuzz-build
	rm -f fuzz/corpus/ctl/*
	build-fuzz/fuzz/seed_ctl fuzz/corpus/ctl

wheel: build
	cmake --build build --target wheel

deb: deps
	JOBS=$(JOBS) cmake/deb.sh build-deb -DKVS_WERROR=$(WERROR) $(CMAKE_FLAGS)

vllm-env:
	python/vllm-env/env.sh

clean:
	rm -rf build build-asan build-tsan build-fuzz build-deb
