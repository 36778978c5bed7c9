#!/usr/bin/env bash
# The whole check, as CI runs it: ruff (lint and format), mypy (its targets and strictness in
# pyproject.toml), then the test suite; extra arguments go to pytest (e.g. -m "not slow").
# Prints the time each part took. pytest's exit 5 (no test ran) fails like any other.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
t1=$(date +%s)
echo "static checks: $(( t1 - t0 )) s"
status=0
.venv/bin/python -m pytest -q "$@" || status=$?
echo "tests: $(( $(date +%s) - t1 )) s (exit $status)"
exit $status
