# make check    set up .venv and run the main job: the backend table and `eventapi check`
# make test     set up .venv and run every test of the product on its interpreter: ruff, mypy
#               --strict, the docs site, pytest and the conformance kit on host, cuda and hip
#               (over the emulated drivers); a few minutes
# make ci       what CI runs after `make test`, each tier alone (docs/testing.md says why):
#   make test-support   the test support's own tests: the emulated drivers, the suite's time
#                       bound, the lint and docs tooling
#   make test-installs  wheels, sdists and installs into fresh venvs, from build/wheelhouse
#   make test-browser   the trace report and speedscope in headless Chromium
#   make test-torch     a torch.distributed job writing one trace (installs torch into .venv)
#   make test-matrix    the product's tests and the installs on the other CPythons, one by one
#   make test-storm     Ctrl-C every millisecond or less for 20 s on cuda and on hip, while
#                       threads record fences and windows: no driver handle left
#   make sanitize       the C extension and the emulated drivers under ASan and UBSan: the kit
#                       and the stress test on cuda and hip (docs/native.md, "Sanitizers")
# make wheelhouse  fill build/wheelhouse with what the install tests install: the only download
#               a test needs, made once; afterwards every test runs with PIP_NO_INDEX=1
# make docs     build the documentation site into build/docs/html, warnings as errors; read it
#               with `python -m http.server -d build/docs/html` (http://localhost:8000)
# make dist     build the three distributions into build/dist and check them (one version, twine)
# make bench    every performance figure as a ratio, side by side in one run
# Each sets up what it needs on first use and is safe to run again.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EMU    := build/emulated
CC     ?= cc
CFLAGS ?= -O2 -g -Wall -Wextra -Werror -std=c11
EMU_LIBS := $(EMU)/libcuda.so.1 $(EMU)/libamdhip64.so $(EMU)/libnvidia-ml.so.1
EMU_CORE := tests/emulated/emu_core.c tests/emulated/emu_core.h tests/emulated/emu_ids.h

.PHONY: all check test lint typecheck pytest conformance ci test-support test-installs \
	test-browser test-torch test-matrix matrix-one test-storm sanitize wheelhouse fuzz soak \
	emulated native bench size docs dist clean

all: test

# What every interpreter's tests need (requirements-test.txt), and in .venv the tools that run
# once (requirements-dev.txt); each .venv-3.X of the matrix gets the first only. The editable
# installs build the backends' C extensions in place (src/*/_native.abi3.so).
REQUIREMENTS ?= requirements-test.txt requirements-dev.txt

$(STAMP): $(REQUIREMENTS) eventapi-core/pyproject.toml eventapi-cuda/pyproject.toml eventapi-hip/pyproject.toml eventapi-cuda/setup.py eventapi-hip/setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(addprefix -r ,$(REQUIREMENTS)) \
		-e eventapi-core -e eventapi-cuda -e eventapi-hip
	touch $@

# The C extensions of eventapi-cuda and eventapi-hip, rebuilt in place when their source
# changes, so that no test runs a stale one: one abi3 build serves every .venv-3.X. Built as
# setup.py builds them (the stable ABI of 3.11, declared in the source), with the compiler and
# the headers of $(PYTHON) alone, so the emulated drivers and the extensions never wait for a
# venv to be made.
NATIVE := eventapi-cuda/src/eventapi_cuda/_native.abi3.so eventapi-hip/src/eventapi_hip/_native.abi3.so
PY_INCLUDE = $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')

native: $(NATIVE)

# Built beside it and moved in: a process still running the old build keeps its own file.
eventapi-%/_native.abi3.so: eventapi-%/_native.c
	$(CC) $(CFLAGS) -fPIC -shared -I$(PY_INCLUDE) -o $@.tmp $< -lm && mv -f $@.tmp $@

# The NVTX injection library that records ranges sits beside the emulated drivers.
NVTX_RECORDER := $(EMU)/libnvtx_recorder.so

# What the tests run on: the emulated drivers, and the backends' extensions built afresh.
# The roctx stand-in, alone in its folder: tests put it on LD_LIBRARY_PATH, found by the real name.
ROCTX_RECORDER := $(EMU)/roctx/libroctx64.so

emulated: $(EMU_LIBS) $(NVTX_RECORDER) $(ROCTX_RECORDER) native

$(ROCTX_RECORDER): tests/roctx/roctx_recorder.c tests/marker_lines.h
	@mkdir -p $(EMU)/roctx
	$(CC) $(CFLAGS) -D_GNU_SOURCE -shared -fPIC -pthread -Wl,-soname,libroctx64.so -o $@ tests/roctx/roctx_recorder.c

$(NVTX_RECORDER): tests/nvtx/nvtx_recorder.c tests/marker_lines.h
	@mkdir -p $(EMU)
	$(CC) $(CFLAGS) -D_GNU_SOURCE -shared -fPIC -pthread -o $@ tests/nvtx/nvtx_recorder.c

$(EMU)/libcuda.so.1: tests/emulated/emu_cuda.c $(EMU_CORE)
	@mkdir -p $(EMU)
	$(CC) $(CFLAGS) -shared -fPIC -pthread -Wl,-soname,libcuda.so.1 -o $@ tests/emulated/emu_cuda.c tests/emulated/emu_core.c

$(EMU)/libamdhip64.so: tests/emulated/emu_hip.c $(EMU_CORE)
	@mkdir -p $(EMU)
	$(CC) $(CFLAGS) -shared -fPIC -pthread -Wl,-soname,libamdhip64.so -o $@ tests/emulated/emu_hip.c tests/emulated/emu_core.c

# The NVML library nvidia-ml-py opens by its soname, for the cuda backend's clocks: preloaded
# beside the emulated libcuda.so.1 (or loaded first in process), it is the one pynvml finds.
$(EMU)/libnvidia-ml.so.1: tests/emulated/emu_nvml.c tests/emulated/emu_ids.h
	@mkdir -p $(EMU)
	$(CC) $(CFLAGS) -shared -fPIC -pthread -Wl,-soname,libnvidia-ml.so.1 -o $@ tests/emulated/emu_nvml.c

# The backends usable here, then cuda and hip once more on the emulated drivers (built first),
# so that all three are seen to work on a machine without a GPU; labelled, since that is not
# the machine's own driver.
check: $(STAMP) emulated
	$(BIN)/eventapi backends
	$(BIN)/eventapi check
	@echo
	@echo "cuda and hip once more, on the emulated drivers built from tests/emulated/ (no GPU needed):"
	@echo
	@echo "cuda (emulated driver: $(EMU)/libcuda.so.1)"
	@LD_PRELOAD=$(CURDIR)/$(EMU)/libcuda.so.1 $(BIN)/eventapi check cuda
	@echo
	@echo "hip (emulated driver: $(EMU)/libamdhip64.so)"
	@LD_PRELOAD=$(CURDIR)/$(EMU)/libamdhip64.so $(BIN)/eventapi check hip

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The tiers (docs/testing.md). `make test` runs the product's tests; each tier that only CI
# needs is a marker (pyproject.toml) and a target below, run alone, one after another.
TIERS   := support or installs or browser or torch or storm
PRODUCT := not ($(TIERS))
# PYTEST_FLAGS adds options (the other interpreters' runs turn the cache off: they share it).
PYTEST_FLAGS ?=
PYTEST := $(BIN)/python -m pytest -q $(PYTEST_FLAGS)

pytest: $(STAMP) emulated
	$(PYTEST) -m "$(PRODUCT)"

# The kit as a user runs it, by name, on each backend with the state machines' default budget.
# tests/test_conformance_kit.py runs it from each backend's class too (a second backend object
# for the foreign-handle checks), and on deliberately broken backends.
KIT := $(BIN)/python -m pytest -q -p no:cacheprovider --pyargs eventapi.testing
PRELOAD_CUDA := LD_PRELOAD="$(CURDIR)/$(EMU)/libcuda.so.1 $(CURDIR)/$(EMU)/libnvidia-ml.so.1"
PRELOAD_HIP  := LD_PRELOAD=$(CURDIR)/$(EMU)/libamdhip64.so

conformance: $(STAMP) emulated
	$(KIT) --eventapi-backend=host
	$(PRELOAD_CUDA) $(KIT) --eventapi-backend=cuda
	$(PRELOAD_HIP) $(KIT) --eventapi-backend=hip

# The site, with warnings as errors and every reference checked (-n): a broken link, a missing
# page or a docstring reference that no longer resolves fails the build. -E rereads every page,
# since Sphinx does not notice a changed docstring. tests/test_docs.py uses the same flags.
SPHINXFLAGS := -W --keep-going -n -E -q

docs: $(STAMP)
	$(BIN)/python -m sphinx -b html $(SPHINXFLAGS) docs build/docs/html

test: lint typecheck docs pytest conformance

# -- what only CI runs, after `make test` ----------------------------------------------------

ci: test-support test-installs test-browser test-torch test-matrix test-storm sanitize

test-support: $(STAMP) emulated
	$(PYTEST) -m support

# What the install tests install, downloaded once per interpreter into build/wheelhouse by
# tests/wheelhouse.sh (one `pip download` per line of tests/wheelhouse.txt): the tests install
# from it and from wheels built from the checkout, with PIP_NO_INDEX set (tests/isolated.py),
# and never download.
wheelhouse: $(STAMP)
	tests/wheelhouse.sh $(BIN)/python

test-installs: wheelhouse emulated
	$(PYTEST) -m installs

test-browser: $(STAMP)
	$(PYTEST) -m browser

# torch (the CPU build, for CPython 3.11, from the file pip finds on this machine's disk) is
# installed only here: about 750 MB that no other test needs.
TORCH := torch==2.13.0

test-torch: $(STAMP)
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH)
	$(PYTEST) -m torch

# The other supported CPythons, each in its own .venv-3.X, one after another: the product's
# tests (less those marked single_interpreter, whose checks no interpreter changes), the
# installs, and the kit. tests/interpreters.sh finds them: pythonX.Y on PATH, else under pyenv.
# MATRIX_REQUIRED=1 (as CI sets it) turns a missing interpreter into a failure.
MATRIX_VERSIONS ?= 3.11 3.12 3.13
MATRIX_REQUIRED ?=
PYENV_ROOT ?= $(HOME)/.pyenv

# `+`: the script runs $(MAKE), which make cannot see on the line (-n and -j then reach it too).
test-matrix: $(STAMP) emulated
	+@MAKE="$(MAKE)" BIN="$(BIN)" MATRIX_VERSIONS="$(MATRIX_VERSIONS)" \
		MATRIX_REQUIRED="$(MATRIX_REQUIRED)" PYENV_ROOT="$(PYENV_ROOT)" tests/interpreters.sh

# One interpreter of the matrix (tests/interpreters.sh calls it with VENV and PYTHON set).
matrix-one: wheelhouse emulated
	$(PYTEST) -m "not (support or browser or torch or storm or single_interpreter)"
	$(MAKE) --no-print-directory conformance

# Interrupt storms on the compiled handles, 20 s a backend (tests/native_storm.py says what runs;
# EVENTAPI_STORM_SECONDS=5 shortens them).
test-storm: $(STAMP) emulated
	$(PYTEST) -m storm

# The C extension and the emulated drivers built with AddressSanitizer and
# UndefinedBehaviorSanitizer (gcc), run on the ordinary interpreter with the ASan runtime
# preloaded first (it must come before every instrumented library), leak detection off
# (CPython's own allocations would drown the report), every report fatal, and Python's objects
# on malloc (PYTHONMALLOC), where ASan sees them: the kit by name and from each class, and
# tests/native_stress.py, on cuda and hip (docs/native.md, "Sanitizers").
# Everything goes under build/sanitize, nothing in place: the extension is built into
# build/sanitize/python/eventapi_cuda (and _hip), beside links to each package's own files, and
# that folder goes first on PYTHONPATH. So the in-place build every other target imports stays
# as it is (an instrumented one cannot load without the runtime preloaded), and the links make
# an edit of a Python file count here at once; only the .so is built twice.
SAN := build/sanitize
SAN_CC := gcc
SAN_CFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -g -O1 -Wall -Wextra -Werror \
	-std=c11
SAN_NATIVE := $(SAN)/python/eventapi_cuda/_native.abi3.so $(SAN)/python/eventapi_hip/_native.abi3.so
SAN_EMU := $(SAN)/emulated/libcuda.so.1 $(SAN)/emulated/libamdhip64.so
SAN_ENV = ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONMALLOC=malloc \
	PYTHONPATH=$(CURDIR)/$(SAN)/python$${PYTHONPATH:+:$$PYTHONPATH}
SAN_CUDA = $(SAN_ENV) LD_PRELOAD="$$($(SAN_CC) -print-file-name=libasan.so) $(CURDIR)/$(SAN)/emulated/libcuda.so.1"
SAN_HIP = $(SAN_ENV) LD_PRELOAD="$$($(SAN_CC) -print-file-name=libasan.so) $(CURDIR)/$(SAN)/emulated/libamdhip64.so"

# pytest captures sys.stdout and sys.stderr only, not the file descriptors: a sanitizer writes
# its report to descriptor 2 as it stops the process, which would otherwise leave it in pytest's
# capture file, unread.
SAN_KIT := $(KIT) --capture=sys

$(SAN)/python/eventapi_cuda/_native.abi3.so: eventapi-cuda/src/eventapi_cuda/_native.c
$(SAN)/python/eventapi_hip/_native.abi3.so: eventapi-hip/src/eventapi_hip/_native.c
$(SAN_NATIVE):
	@mkdir -p $(@D)
	$(SAN_CC) $(SAN_CFLAGS) -fPIC -shared -I$(PY_INCLUDE) -o $@ $< -lm

$(SAN)/emulated/libcuda.so.1: tests/emulated/emu_cuda.c $(EMU_CORE)
	@mkdir -p $(@D)
	$(SAN_CC) $(SAN_CFLAGS) -shared -fPIC -pthread -Wl,-soname,libcuda.so.1 -o $@ \
		tests/emulated/emu_cuda.c tests/emulated/emu_core.c

$(SAN)/emulated/libamdhip64.so: tests/emulated/emu_hip.c $(EMU_CORE)
	@mkdir -p $(@D)
	$(SAN_CC) $(SAN_CFLAGS) -shared -fPIC -pthread -Wl,-soname,libamdhip64.so -o $@ \
		tests/emulated/emu_hip.c tests/emulated/emu_core.c

sanitize: $(STAMP) $(SAN_NATIVE) $(SAN_EMU)
	@for p in cuda hip; do \
		find $(SAN)/python/eventapi_$$p -xtype l -delete; \
		ln -sf $(CURDIR)/eventapi-$$p/src/eventapi_$$p/*.py $(CURDIR)/eventapi-$$p/src/eventapi_$$p/py.typed \
			$(SAN)/python/eventapi_$$p/; \
	done
	$(SAN_CUDA) $(SAN_KIT) --eventapi-backend=cuda
	$(SAN_CUDA) $(SAN_KIT) --eventapi-backend=eventapi_cuda:CudaBackend
	$(SAN_HIP) $(SAN_KIT) --eventapi-backend=hip
	$(SAN_HIP) $(SAN_KIT) --eventapi-backend=eventapi_hip:HipBackend
	$(SAN_CUDA) $(BIN)/python tests/native_stress.py cuda
	$(SAN_HIP) $(BIN)/python tests/native_stress.py hip

# -- measuring, and longer searches ------------------------------------------------------------

# The kit's state machines with a longer budget, on every backend from its class (so handles
# of a second backend object are among the random arguments): make fuzz FUZZ_EXAMPLES=5000
FUZZ_EXAMPLES ?= 1000
FUZZ := $(KIT) -k state_machine --eventapi-fuzz-examples=$(FUZZ_EXAMPLES)

fuzz: $(STAMP) emulated
	$(FUZZ) --eventapi-backend=eventapi.host:HostBackend
	$(PRELOAD_CUDA) $(FUZZ) --eventapi-backend=eventapi_cuda:CudaBackend
	$(PRELOAD_HIP) $(FUZZ) --eventapi-backend=eventapi_hip:HipBackend

# Fences and windows from 8 threads for SOAK_SECONDS on each of host and emulated cuda, memory
# and live handles sampled; fails on growth. Not part of `make test`: make soak SOAK_SECONDS=60
SOAK_SECONDS ?= 600

soak: $(STAMP) emulated
	$(BIN)/python benchmarks/soak.py host --seconds $(SOAK_SECONDS)
	$(PRELOAD_CUDA) $(BIN)/python benchmarks/soak.py cuda --seconds $(SOAK_SECONDS)

# The core's lines of code (statements: no docstrings, comments or blank lines), by part.
size:
	python3 benchmarks/core_size.py

# Every performance figure as a ratio, side by side in one run; ARGS="--load 2" runs it beside
# two busy processes, ARGS="--json FILE" keeps the figures for comparison across commits.
bench: $(STAMP) emulated
	$(BIN)/python benchmarks/run.py $(ARGS)

# -- releasing ---------------------------------------------------------------------------------

# The three distributions, sdist and wheel each, into build/dist; one version for all three,
# and metadata that twine accepts (the long description renders, the fields are valid).
DISTRIBUTIONS := eventapi-core eventapi-cuda eventapi-hip

# eventapi-cuda and eventapi-hip are platform wheels (their C extension, one abi3 build for
# CPython 3.11 and later): auditwheel checks that the extension needs no library but the C
# library's (and libm), at symbol versions no newer than glibc 2.17; with nothing to graft
# into the wheel, `wheel tags` retags it manylinux_2_17 (docs/release.md: the other builds).
MANYLINUX := manylinux_2_17_$(shell uname -m)

dist: $(STAMP)
	rm -rf build/dist
	for d in $(DISTRIBUTIONS); do $(BIN)/python -m build -q --outdir build/dist $$d || exit 1; done
	for w in build/dist/eventapi_cuda-*-linux_*.whl build/dist/eventapi_hip-*-linux_*.whl; do \
		$(BIN)/auditwheel show $$w | tee build/dist/auditwheel.txt && \
		grep -q '"$(MANYLINUX)"' build/dist/auditwheel.txt && \
		$(BIN)/python -m wheel tags --remove --platform-tag $(MANYLINUX) $$w || exit 1; \
	done
	$(BIN)/python -c 'import pathlib, sys; \
		versions = {p.name.split("-")[1] for p in pathlib.Path("build/dist").glob("*.whl")}; \
		sys.exit(f"versions differ: {sorted(versions)}" if len(versions) != 1 else None)'
	rm build/dist/auditwheel.txt
	$(BIN)/twine check --strict build/dist/*

clean:
	rm -rf $(VENV) .venv-3.* build .mypy_cache .ruff_cache .pytest_cache
