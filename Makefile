# The two commands: `make demo` and `make test`. Each does its own set-up.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=
# the virtual environment scripts/install-deps.sh makes: the Python package builds for it
VENV ?= .venv
export VENV
PYTHON_FLAGS = -DLAZYTRACE_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/$(VENV)/bin/python

.PHONY: all deps configure build test fuzz-long demo demo-dist bench bench-dist bench-smoke bench-peers bench-python check-asan check-tsan fuzz install format clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(PYTHON_FLAGS) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# 100,000 random programs through lt_fuzz (tests/fuzz), in chunks that print progress; each
# program runs in a child first, so a crash is reported and shrunk too. Failing programs go
# to $(BUILD)/fuzz-failures; rerun one with `lt_fuzz --seed S --count 1 --isolate --shrink`.
FUZZ_SEED ?= 1000000
FUZZ_COUNT ?= 100000
FUZZ_CHUNK ?= 5000
fuzz-long: build
	@fail=0; ran=0; \
	while [ $$ran -lt $(FUZZ_COUNT) ]; do \
	  n=$$(( $(FUZZ_COUNT) - ran < $(FUZZ_CHUNK) ? $(FUZZ_COUNT) - ran : $(FUZZ_CHUNK) )); \
	  echo "== lt_fuzz: $$ran of $(FUZZ_COUNT) programs done, seeds $$(( $(FUZZ_SEED) + ran )).."; \
	  $(BUILD)/tests/fuzz/lt_fuzz --seed $$(( $(FUZZ_SEED) + ran )) --count $$n --isolate \
	    --dump $(BUILD)/fuzz-failures || fail=1; \
	  ran=$$(( ran + n )); \
	done; \
	echo "== lt_fuzz: $(FUZZ_COUNT) programs done"; exit $$fail

# The main job: train the byte-level decoder three ways (layers as a loop, through
# assume_pure, as scan_layers) and compare what each costs, then sample from it.
DEMO_DIR ?= lazytrace-report
demo: build
	@$(BUILD)/apps/lazytrace compare --steps 60 --layers 8 --out-dir $(DEMO_DIR)
	@echo "== sampling from $(DEMO_DIR)/model.safetensors (one while_loop in the backend)"
	@$(BUILD)/apps/lazytrace generate --weights $(DEMO_DIR)/model.safetensors --prompt "This License " --max-tokens 48
	@echo "== the table: $(DEMO_DIR)/compare.md (and compare.json); the chart: $(DEMO_DIR)/compare.png"
	@echo "== the spec's examples, in Python (examples/python/spec_examples.py)"
	@PYTHONPATH=$(BUILD)/python $(VENV)/bin/python examples/python/spec_examples.py

# Data parallel over MPI: the same training on 2 ranks of one thread each (`mpirun -np 2`),
# rank 0 printing and saving; then a sample from its weights. As root, Open MPI needs its two
# allow-run-as-root variables: set for this command only.
MPI_AS_ROOT = $(if $(filter 0,$(shell id -u)),OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
demo-dist: build
	@mkdir -p $(DEMO_DIR)
	@$(MPI_AS_ROOT) mpirun -np 2 --oversubscribe -x LAZYTRACE_NUM_THREADS=1 \
	  $(BUILD)/apps/lazytrace train --steps 60 --layers 4 --batch 8 --seq 64 --log-every 10 \
	  --out $(DEMO_DIR)/dist-model.safetensors
	@echo "== sampling from $(DEMO_DIR)/dist-model.safetensors"
	@$(BUILD)/apps/lazytrace generate --weights $(DEMO_DIR)/dist-model.safetensors --prompt "This License " --max-tokens 48

# Data-parallel scaling of `lazytrace train` at the compute-heavy size: 1 rank x 1 and 2
# threads against 2 MPI ranks x 1 thread, alternated; and Open MPI's collectives alone by
# bucket size (docs/benchmarks.md)
bench-dist: build
	@mpicxx -O2 -std=c++17 bench/dist/mpi_collectives.cpp -o $(BUILD)/mpi_collectives
	@$(MPI_AS_ROOT) mpirun -np 2 $(BUILD)/mpi_collectives
	@python3 bench/dist/dist_scaling.py --cli $(BUILD)/apps/lazytrace

bench:
	@scripts/install-deps.sh --bench
	@cmake -S . -B $(BUILD)-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAZYTRACE_BUILD_BENCH=ON -DLAZYTRACE_BUILD_TESTS=OFF -DLAZYTRACE_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-bench -j $(JOBS)
	@scripts/run-bench.sh $(BUILD)-bench -- --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

# Every benchmark program built and run once (CI): they reach internal headers, so a change
# can stop them compiling without any test noticing. Its numbers are not for the docs.
bench-smoke:
	@scripts/install-deps.sh --bench
	@cmake -S . -B $(BUILD)-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAZYTRACE_BUILD_BENCH=ON -DLAZYTRACE_BUILD_TESTS=OFF -DLAZYTRACE_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-bench -j $(JOBS)
	@scripts/run-bench.sh $(BUILD)-bench --smoke

# lazytrace beside LibTorch eager on the same weights (Debian's libtorch-dev)
# lazytrace beside its peers on the same decoder and weights: LibTorch 1.13 eager (C++), then
# from Python PyTorch 2 eager and torch.compile, JAX's jit with a loop and with lax.scan, and
# torch_xla's plain tracing, assume_pure and scan_layers (PEER_SIZES: spec-10,spec-100,compute)
PEER_SIZES ?= spec-10,spec-100,compute
bench-peers: build
	@scripts/install-deps.sh --peers
	@cmake -S . -B $(BUILD)-peers -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAZYTRACE_BUILD_PEERS=ON -DLAZYTRACE_BUILD_TESTS=OFF -DLAZYTRACE_BUILD_EXAMPLES=OFF -DLAZYTRACE_BUILD_APPS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-peers -j $(JOBS)
	@$(BUILD)-peers/bench/peers/peers_bench --json $(BUILD)-peers/libtorch.json
	@PYTHONPATH=$(BUILD)/python .venv-peers/bin/python bench/peers/python_peers.py --sizes $(PEER_SIZES) \
	  --libtorch $(BUILD)-peers/libtorch.json

# lazytrace from Python beside PyTorch eager (Debian's python3-torch) in one process, and a
# training step driven from Python against the same step driven from C++
bench-python:
	@scripts/install-deps.sh --bench-python
	@cmake -S . -B $(BUILD)-pybench -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAZYTRACE_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/.venv-bench/bin/python -DLAZYTRACE_BUILD_TESTS=OFF -DLAZYTRACE_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-pybench -j $(JOBS)
	@PYTHONPATH=$(BUILD)-pybench/python .venv-bench/bin/python bench/python/bench_python.py --cli $(BUILD)-pybench/apps/lazytrace

# The C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer, and the threaded ones
# under ThreadSanitizer: any report fails the run. Not part of `make test` (slow builds).
# The tests that run under mpirun check everything but leaks: Open MPI leaves blocks of its
# own at MPI_Finalize, in components it has unloaded by then (no name to suppress them by).
SANITIZE_FLAGS = -DCMAKE_BUILD_TYPE=Release -DLAZYTRACE_BUILD_PYTHON=OFF $(CMAKE_FLAGS)
ASAN_ENV = UBSAN_OPTIONS=print_stacktrace=1 ASAN_OPTIONS=abort_on_error=1:allocator_may_return_null=1
MPIRUN_TESTS = ^mpi[.]|UnderMpirun
check-asan: deps
	@cmake -S . -B $(BUILD)-asan -G Ninja -DLAZYTRACE_SANITIZE=address,undefined $(SANITIZE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	@cd $(BUILD)-asan && $(ASAN_ENV):detect_leaks=1 \
	  ctest --output-on-failure -j $(JOBS) -E '^package[.]|isa_symbols|^fuzz[.]|$(MPIRUN_TESTS)'
	@cd $(BUILD)-asan && $(ASAN_ENV):detect_leaks=0 \
	  ctest --output-on-failure -j $(JOBS) -R '$(MPIRUN_TESTS)' --no-tests=ignore
	@$(ASAN_ENV):detect_leaks=1 $(BUILD)-asan/tests/fuzz/lt_fuzz --seed 1 --count 500
check-tsan: deps
	@cmake -S . -B $(BUILD)-tsan -G Ninja -DLAZYTRACE_SANITIZE=thread $(SANITIZE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS)
	@cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/scripts/tsan.supp" \
	  ctest --output-on-failure -j $(JOBS) -R 'Threading[.]|[.]one_thread|[.]far_cores|Scan[.]AdamW|^fuzz[.]threads'

# libFuzzer on the safetensors reader and its header parser, FUZZ_SECONDS each (or until
# FUZZ_RUNS executions, where set), from the seed corpus in tests/libfuzzer/seeds (needs
# clang); FUZZ_TARGETS picks some of the three
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= -1
FUZZ_TARGETS ?= safetensors_fuzz safetensors_struct_fuzz header_fuzz
fuzz: deps
	@CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAZYTRACE_LIBFUZZER=ON \
	  -DLAZYTRACE_BUILD_TESTS=OFF -DLAZYTRACE_BUILD_EXAMPLES=OFF -DLAZYTRACE_BUILD_APPS=OFF \
	  -DLAZYTRACE_BUILD_PYTHON=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS)
	@FUZZ_RUNS=$(FUZZ_RUNS) scripts/run-fuzz.sh $(BUILD)-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

install: build
	@cmake --install $(BUILD) --prefix $(or $(PREFIX),/usr/local)

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf $(BUILD) $(BUILD)-bench $(BUILD)-peers $(BUILD)-pybench $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz $(DEMO_DIR)
