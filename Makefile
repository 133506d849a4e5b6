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

.PHONY: all check test lint typecheck pytest conformance emulated bench clean

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

conformance: $(STAMP) emulated
	$(BIN)/python -m pytest -q --pyargs eventapi.testing --eventapi-backend=host
	LD_PRELOAD=$(CURDIR)/$(EMU)/libcuda.so.1 $(BIN)/python -m pytest -q --pyargs eventapi.testing --eventapi-backend=cuda
	LD_PRELOAD=$(CURDIR)/$(EMU)/libamdhip64.so $(BIN)/python -m pytest -q --pyargs eventapi.testing --eventapi-backend=hip

test: lint typecheck pytest conformance

bench: $(STAMP) emulated
	$(BIN)/python benchmarks/import_cost.py
	LD_PRELOAD=$(CURDIR)/$(EMU)/libcuda.so.1 $(BIN)/python benchmarks/fence_window.py cuda

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache
