# `make run` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ROOT ?= ./data

.PHONY: run test lint test-repeat bench demo install clean docs

$(STAMP): pyproject.toml
	@echo "setting up $(VENV) (pinned dependencies from pyproject.toml; log in $(VENV)/install.log)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	@$(BIN)/pip install --upgrade pip > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@$(BIN)/pip install -e '.[test]' >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@$(BIN)/python -c "import lakelog, deltalake, pyspark, fastapi" && touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/lakelog --root $(ROOT) serve

demo: $(STAMP)
	@bash scripts/demo.sh $(ROOT)

# Two workers: much of the suite waits (servers, Spark, Terraform); Spark's tests share one worker and
# Terraform's another (tests/conftest.py groups them). The multi-node cluster tests run afterwards on
# their own: their timing under three CPU-bound nodes does not survive a second workload beside them.
# TEST_WORKERS= runs the first part serially too.
TEST_WORKERS ?= -n 2 --dist loadgroup

# The independent Kafka clients of tests/kafka/test_independent_*.py: kcat (Debian's package, below)
# and KafkaJS, `npm ci` from the committed tests/kafka/js/package-lock.json (node and npm from Debian when
# missing). A client that could not be installed skips its tests, and fails them under CI=true.
KAFKAJS := tests/kafka/js
$(KAFKAJS)/node_modules/.installed: $(KAFKAJS)/package-lock.json | $(STAMP)
	@command -v npm >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq nodejs npm) >/dev/null 2>&1 || true
	@(cd $(KAFKAJS) && npm ci --no-audit --no-fund) > $(VENV)/npm-ci.log 2>&1 && touch $@ || \
		(tail -5 $(VENV)/npm-ci.log; echo "npm ci in $(KAFKAJS) failed: the KafkaJS tests are skipped")

test: $(STAMP) $(KAFKAJS)/node_modules/.installed
	@command -v chromedriver >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) \
		>/dev/null 2>&1 || echo "chromium (Debian package) is not installed: the web console test is skipped"
	@command -v kcat >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq kcat) >/dev/null 2>&1 || \
		echo "kcat (Debian package) is not installed: the kcat tests are skipped"
	@failed=""; \
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest -q -p no:cacheprovider --instafail $(TEST_WORKERS) \
		--ignore=tests/cluster $(PYTEST_ARGS) || failed="$$failed the-parallel-part"; \
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest -q -p no:cacheprovider --instafail tests/cluster \
		$(PYTEST_ARGS) || failed="$$failed tests/cluster"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

# ruff and mypy over lakelog/ (their settings are in pyproject.toml); CI runs this before the tests.
lint: $(STAMP)
	$(BIN)/ruff check lakelog
	$(BIN)/mypy

# The cluster, chaos and concurrency tests REPEAT times in a row, stopping at the first red run; HOG=1 keeps
# one core busy beside them (a loaded machine). `make test-repeat REPEAT=3 HOG=1`.
REPEAT ?= 3
HOG ?= 0
test-repeat: $(STAMP)
	@PYSPARK_PYTHON=$(abspath $(BIN)/python) REPEAT=$(REPEAT) HOG=$(HOG) bash scripts/test_repeat.sh $(PYTEST_ARGS)

bench: $(STAMP)
	@command -v hey >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq hey) >/dev/null 2>&1 || \
		echo "hey (Debian package) is not installed: the single-record HTTP figures are skipped"
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# The documentation site (mkdocs.yml, Material for MkDocs from the test extra): docs/ built into site/ in strict
# mode (a broken link or anchor fails it), with nothing fetched. tests/docs/test_site.py runs the same build in
# `make test`. Open site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis
