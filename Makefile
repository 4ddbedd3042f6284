# Two commands do everything on a fresh machine: `make train PAIR=gl-en` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PAIR ?= gl-en
SYSTEM ?= qknorm
DEVICE ?= auto
SCALE ?= auto
FROM ?= $(wildcard ../shared/data/$(PAIR))
PAIRS ?= gl-en
SYSTEMS ?= prenorm_fixnorm_scalenorm qknorm
STAMP := $(VENV)/.installed

.PHONY: install test lint train bench reproduce clean

$(STAMP): pyproject.toml scripts/install
	$(PYTHON) scripts/install --venv $(VENV)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check nmt tests scripts fidelity
	$(BIN)/mypy nmt

train: $(STAMP)
	$(BIN)/python scripts/train_pair --pair $(PAIR) --system $(SYSTEM) --device $(DEVICE) --scale $(SCALE) $(if $(FROM),--from-dir $(FROM),)

bench: $(STAMP)
	$(BIN)/nmt bench configs/bench.yaml --device $(DEVICE)

reproduce: $(STAMP)
	$(BIN)/python scripts/reproduce --pairs "$(PAIRS)" --systems "$(SYSTEMS)" --device $(DEVICE) --scale $(SCALE)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
