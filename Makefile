# Two commands do everything on a fresh machine: `make train PAIR=gl-en` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PAIR ?= gl-en
SYSTEM ?= qknorm
DEVICE ?= auto
SCALE ?= auto
# FROM: a local folder of prepared {train,dev,test} files to use instead of downloading; by default the CI machine's
# folder when it exists (empty elsewhere, so the corpus is downloaded)
FROM ?= $(wildcard ../shared/data/$(PAIR))
PAIRS ?= gl-en
SYSTEMS ?= prenorm_fixnorm_scalenorm qknorm
SEEDS ?= 1
# STEPS: train every reproduce run for this many updates (no time limit), so runs on different machines compare
STEPS ?=
# SET: config overrides of `make train`, space-separated (e.g. SET="train.max_minutes=120 train.save_every=400")
SET ?=
STAMP := $(VENV)/.installed

.PHONY: install test lint floors train bench reproduce clean

$(STAMP): pyproject.toml scripts/install
	$(PYTHON) scripts/install --venv $(VENV)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check nmt tests scripts fidelity
	$(BIN)/mypy nmt

# the tests again with every runtime dependency at its pyproject.toml floor (a second venv, .venv-floors); torch is
# this venv's own, which scripts/check_floors requires to be at its floor (--torch would install the floor)
floors: $(STAMP)
	$(BIN)/python scripts/check_floors

train: $(STAMP)
	$(BIN)/python scripts/train_pair --pair $(PAIR) --system $(SYSTEM) --device $(DEVICE) --scale $(SCALE) $(if $(FROM),--from-dir $(FROM),) \
		$(foreach o,$(SET),--set $(o))

bench: $(STAMP)
	$(BIN)/nmt bench configs/bench.yaml --device $(DEVICE)

reproduce: $(STAMP)
	$(BIN)/python scripts/reproduce --pairs "$(PAIRS)" --systems "$(SYSTEMS)" --seeds "$(SEEDS)" --device $(DEVICE) \
		--scale $(SCALE) $(if $(STEPS),--max-steps $(STEPS),)

clean:
	rm -rf $(VENV) .venv-floors .pytest_cache .mypy_cache .ruff_cache
