#!/usr/bin/env bash
# Create .venv and install InfraRSI with its test, benchmark, Ray and static-check (ruff, mypy)
# dependencies; safe to run again.
# PyTorch first: with no torch installed, a plain `torch` requirement pulls a CUDA build of
# several GB, so machines without a GPU get the CPU build explicitly.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    pip install "torch==${TORCH_VERSION}"                        # CUDA build
  elif [ -n "${TORCH_CPU_INDEX_URL:-}" ]; then
    pip install "torch==${TORCH_VERSION}" --index-url "$TORCH_CPU_INDEX_URL"
  else
    pip install "torch==${TORCH_VERSION}"                        # this machine's CPU wheel
  fi
fi
pip install -e ".[test,bench,ray,dev]"
echo "setup done: $(.venv/bin/python -c 'import torch; print("torch", torch.__version__)')"
