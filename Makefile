# The README's two commands: `make demo` (the main job) and `make test` (the tests).
.PHONY: demo test lint setup

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/loadkit demo

test:
	@bash scripts/setup.sh --with-browser --with-mlserver --with-prometheus
	.venv/bin/python -m pytest -q -n 4 --dist loadfile --no-loadscope-reorder -m "not quiet_host"
	.venv/bin/python -m pytest -q -m quiet_host

lint: setup
	.venv/bin/ruff check loadkit tests bench scenarios
	.venv/bin/ruff format --check loadkit tests bench scenarios
	.venv/bin/mypy
	.venv/bin/lint-imports
