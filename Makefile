# Kathikon — the two commands a newcomer needs are `make demo` and `make test`.
PY ?= .venv/bin/python
.DEFAULT_GOAL := help

.PHONY: help venv venvs demo test test-fast lint docs bench bench-quick clean

help:
	@echo "make demo    set up, then enqueue example jobs and run a worker on SQLite"
	@echo "make test    set up, then run the whole suite on SQLite, PostgreSQL and MariaDB"
	@echo "make lint    ruff, mypy and the migrations check"
	@echo "make docs    build the documentation into site/ (offline)"
	@echo "make bench   benchmarks (PostgreSQL; MariaDB and SQLite labelled; peers via the shared harness) -> docs/benchmarks.md"

venv:
	@scripts/bootstrap.sh primary

venvs:
	@scripts/bootstrap.sh all

demo: venv
	@$(PY) scripts/demo.py

test: venvs lint
	@$(PY) scripts/test_matrix.py

test-fast: venv
	KATHIKON_DB=$${KATHIKON_DB:-sqlite} $(PY) -m pytest -q -m "not slow and not browser"

lint: venv
	@.venv/bin/ruff check kathikon tests testproject scripts
	@.venv/bin/mypy kathikon
	@cd testproject && ../$(PY) manage.py makemigrations kathikon --check --dry-run >/dev/null \
		|| (echo "models and migrations differ: run makemigrations" && exit 1)

docs: venv
	@$(PY) -m mkdocs build --strict --site-dir site

bench: venv
	@$(PY) -m benchmarks

bench-quick: venv
	@$(PY) -m benchmarks --quick

clean:
	rm -rf .venv .venv-52 site .test-reports testproject/*.sqlite3*
