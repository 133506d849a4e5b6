# make check   set up .venv and run the main job: the backend table and `eventapi check`
# make test    set up .venv and run every test: ruff, mypy --strict, pytest, the conformance kit
#              on host and on cuda and hip over the emulated drivers
# Both create .venv on first use and are idempotent.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EMU    := build/emulated
CC     ?= cc
CFLAGS ?= -O2 -g -Wall -Wextra -Werror -std=c11
EMU_LIBS := $(EMU)/libcuda.so.1 $(EMU)/libamdhip64.so
EMU_CORE := tests/emulated/emu_core.c tests/emulated/emu_core.h

.PHONY: all check test lint typecheck pytest conformance fuzz soak emulated bench clean

all: test

$(STAMP): requirements-dev.txt eventapi-core/pyproject.toml eventapi-cuda/pyproject.toml eventapi-hip/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-dev.txt \
		-e eventapi-core -e eventapi-cuda -e eventapi-hip
	touch $@

emulated: $(EMU_LIBS)

$(EMU)/libcuda.so.1: tests/emulated/emu_cuda.c $(EMU_CORE)
	@mkdir -p $(EMU)
	$(CC) $(CFLAGS) -shared -fPIC -pthread -Wl,-soname,libcuda.so.1 -o $@ tests/emulated/emu_cuda.c tests/emulated/emu_core.c

$(EMU)/libamdhip64.so: tests/emulated/emu_hip.c $(EMU_CORE)
	@mkdir -p $(EMU)
	$(CC) $(CFLAGS) -shared -fPIC -pthread -Wl,-soname,libamdhip64.so -o $@ tests/emulated/emu_hip.c tests/emulated/emu_core.c

check: $(STAMP)
	$(BIN)/eventapi backends
	$(BIN)/eventapi check

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) emulated
	$(BIN)/python -m pytest -q

# Each backend by name, as a user runs the kit, and once more from its class, which lets the kit
# build a second backend object for the foreign-handle checks.
KIT := $(BIN)/python -m pytest -q -p no:cacheprovider --pyargs eventapi.testing
PRELOAD_CUDA := LD_PRELOAD=$(CURDIR)/$(EMU)/libcuda.so.1
PRELOAD_HIP  := LD_PRELOAD=$(CURDIR)/$(EMU)/libamdhip64.so

conformance: $(STAMP) emulated
	$(KIT) --eventapi-backend=host
	$(KIT) --eventapi-backend=eventapi.host:HostBackend
	$(PRELOAD_CUDA) $(KIT) --eventapi-backend=cuda
	$(PRELOAD_CUDA) $(KIT) --eventapi-backend=eventapi_cuda:CudaBackend
	$(PRELOAD_HIP) $(KIT) --eventapi-backend=hip
	$(PRELOAD_HIP) $(KIT) --eventapi-backend=eventapi_hip:HipBackend

test: lint typecheck pytest conformance

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

bench: $(STAMP) emulated
	$(BIN)/python benchmarks/import_cost.py
	LD_PRELOAD=$(CURDIR)/$(EMU)/libcuda.so.1 $(BIN)/python benchmarks/fence_window.py cuda

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache
