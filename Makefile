# The README's two commands: `make demo` (the main job) and `make test` (the tests).
.PHONY: demo test lint setup

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/loadkit demo

# Pass 2 collects only the files that mark a test quiet_host (collecting all 1,300 tests to
# deselect them took 8 s); the mark stays the one rule of what runs there.
QUIET_FILES = $(shell grep -rl --include='test_*.py' 'mark.quiet_host' tests)

# Bytecode is written (PYTHONDONTWRITEBYTECODE emptied, where a machine sets it): the suite
# starts hundreds of Python processes (`loadkit` commands, Locust workers), and without
# __pycache__ each compiled loadkit's modules again (0.3-0.4 s a process), as each pytest
# worker rewrote every test module's asserts again.
test:
	@bash scripts/setup.sh --with-browser --with-mlserver --with-prometheus
	PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q -n 4 --dist loadfile --no-loadscope-reorder -m "not quiet_host"
	PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q -m quiet_host $(QUIET_FILES)

lint: setup
	.venv/bin/ruff check loadkit tests bench scenarios
	.venv/bin/ruff format --check loadkit tests bench scenarios
	.venv/bin/mypy
	.venv/bin/lint-imports
