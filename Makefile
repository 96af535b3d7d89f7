# The two commands for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SECONDS ?= 60

.PHONY: demo test venv clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch is installed explicitly at the pinned CPU version first, so nothing pulls a CUDA build.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[node,sim,train,viz,bench,dev]'
	touch $@

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[node,sim,viz]'
	touch $@

venv: $(VENV)/.installed-dev

demo: $(VENV)/.installed-demo
	$(BIN)/rtinfer demo --seconds $(SECONDS)

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis

# LeRobot ACT venv (examples/conveyor_sorting/lerobot_act.py); LEROBOT_VENV overrides the path.
LEROBOT_VENV ?= .venv-lerobot
.PHONY: lerobot-env
lerobot-env:
	LEROBOT_VENV=$(LEROBOT_VENV) bash scripts/lerobot_env.sh
