#!/usr/bin/env bash
# The GPU path proven in one command, from a fresh copy of the repository on a machine with CuPy,
# a CUDA GPU, PyTorch and transformers, and no network (benchmarks/gpu_check.py says what it checks):
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]            # report in OUT_DIR (default gpu-check/)
#   bash benchmarks/gpu_check.sh --dry-run [OUT_DIR]  # no GPU: the same script on the CuPy stand-in
#   bash benchmarks/gpu_check.sh OUT_DIR --deadline-s 420   # options after OUT_DIR go to gpu_check.py
#
# Wheels the machine lacks (num2words, for the numbers-en-fr run) can wait in .whl/ beside this
# repository's root; they are installed from there, nothing is downloaded.
set -uo pipefail
cd "$(dirname "$0")/.."
dry_run=()
if [[ "${1:-}" == "--dry-run" ]]; then dry_run=(--dry-run); shift; fi
out="${1:-gpu-check}"
shift || true
mkdir -p "$out"
python=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$python" -m pip install --quiet --no-index --no-deps --no-cache-dir .whl/*.whl 2>&1 | tail -2
fi
# the package itself, without its dependencies or a build environment (neither can be downloaded)
"$python" -m pip install --quiet --no-deps --no-build-isolation -e . 2>&1 | tail -2 ||
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHONUNBUFFERED=1 "$python" benchmarks/gpu_check.py "${dry_run[@]}" --out "$out" "$@" 2>&1 | tee "$out/log.txt"
