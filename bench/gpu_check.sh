#!/usr/bin/env bash
# The GPU check, as one command for a machine with a CUDA GPU and PyTorch (the device machine
# a session may be lent): bench/gpu_check.py over the one-node workloads' `gpu` scale.
#   bash bench/gpu_check.sh [OUT_DIR] [DEADLINE_S]
# Where infrarsi's own dependencies are missing, the wheels in .whl (downloaded on a machine
# with the registries: see docs/benchmarks.md) are installed beside the checkout, not into the
# system. Writes gpu_check.json, gpu_check.txt and log.txt to OUT_DIR.
set -uo pipefail
out=${1:-${OUT:-bench/results/gpu}}
deadline_s=${2:-420}
py=${PYTHON:-python3}
mkdir -p "$out"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$PWD/.site" .whl/*.whl || exit 1
  export PYTHONPATH="$PWD/.site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  "$py" -c "from infrarsi import host; print('fingerprint', host.host_fingerprint())"
  "$py" bench/gpu_check.py --out "$out" --deadline-s "$deadline_s"
} 2>&1 | tee "$out/log.txt"
