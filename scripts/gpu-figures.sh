#!/usr/bin/env bash
# The GPU figures of BENCHMARKS.md in one short, sure command: a preflight, the self-test, the
# training benchmark and the rasterizer benchmark at 1M splats 1080p (profiled), and the
# default 30,000-step run of a capture at full resolution with its evaluation, each under a
# timeout, everything written under OUT as it goes. Sized for at most 8 minutes on an H100.
#
#   scripts/gpu-figures.sh build                        a stripped release binary in dist/
#   scripts/gpu-figures.sh run [--allow-cpu] [--tiny] DATASET [OUT]
#
# `run` uses dist/splatforge (or $SPLATFORGE); OUT defaults to gpu-figures/. DATASET is a
# capture whose images are 1920 px or more on the long side (the shared desk-penguin-opencv).
# The preflight writes what the machine says about its GPU (vulkaninfo --summary, nvidia-smi
# -q, the adapter splatforge opens) and refuses a CPU adapter (software Vulkan: the benchmarks
# would take hours) unless --allow-cpu. --tiny shrinks every step to seconds (a check of the
# script itself). MEMORY_BUDGET=24GiB passes a budget where the driver cannot say one. Every
# step runs whatever the one before did; status.txt lists each step's exit status, and the
# script exits with the worst.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
    sed -n '2,17p' "$0"
    exit 2
}

run() {
    local allow_cpu=0 tiny=0
    while [ $# -gt 0 ]; do
        case "$1" in
        --allow-cpu) allow_cpu=1 ;;
        --tiny) tiny=1 ;;
        -*) usage ;;
        *) break ;;
        esac
        shift
    done
    local dataset="${1:-}" out="${2:-gpu-figures}"
    [ -n "$dataset" ] || usage
    local bin="${SPLATFORGE:-dist/splatforge}"
    [ -x "$bin" ] || { echo "no splatforge binary at $bin (scripts/gpu-figures.sh build)" >&2; exit 2; }
    mkdir -p "$out"
    # The sample scene and anything else the binary keeps go under OUT, not $HOME.
    export XDG_DATA_HOME="$out/data"
    local budget=()
    [ -n "${MEMORY_BUDGET:-}" ] && budget=(--memory-budget "$MEMORY_BUDGET")
    : >"$out/status.txt"
    local worst=0

    # step NAME SECONDS COMMAND...: runs one step under a timeout, its output in OUT/NAME.txt.
    step() {
        local name=$1 seconds=$2 status=0
        shift 2
        echo "== $name ($(date -u +%H:%M:%S), at most ${seconds} s)"
        timeout "$seconds" "$@" >"$out/$name.txt" 2>&1 || status=$?
        tail -n 3 "$out/$name.txt"
        echo "$name $status" >>"$out/status.txt"
        [ "$status" -gt "$worst" ] && worst=$status
        return 0
    }

    command -v vulkaninfo >/dev/null && vulkaninfo --summary >"$out/vulkaninfo.txt" 2>&1
    command -v nvidia-smi >/dev/null && nvidia-smi -q >"$out/nvidia-smi.txt" 2>&1
    step adapter 30 "$bin" self-test --adapter-only --json "$out/adapter.json" "${budget[@]}"
    local type
    type=$(sed -n 's/.*"device_type": *"\([A-Za-z]*\)".*/\1/p' "$out/adapter.json" 2>/dev/null)
    echo "adapter: $(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$out/adapter.json" 2>/dev/null), ${type:-unknown}"
    if [ -z "$type" ]; then
        echo "no GPU adapter could be opened: see $out/adapter.txt" >&2
        exit 3
    fi
    if [ "$type" = Cpu ] && [ "$allow_cpu" = 0 ]; then
        echo "refusing: the adapter is a CPU (software Vulkan), where the benchmarks take hours;" \
            "install the GPU's Vulkan driver, or pass --allow-cpu" >&2
        exit 3
    fi

    # --tiny checks the script on any machine, busy or slow (CI runs it beside other tests):
    # its steps are small but get ten times the time; the self-test is the quick one (its
    # training runs 60 steps, not 150: the suite runs the whole self-test in the window's test).
    local scale=1 quick=()
    local render=(--splats 1000000 --sizes 1920x1080 --runs 5)
    local train=(--steps 60 --window 20 --max-resolution 1920 --splats 1000000)
    local default=(--max-resolution 1920)
    if [ "$tiny" = 1 ]; then
        scale=10
        quick=(--quick)
        render=(--splats 2000 --sizes 64x64 --runs 2)
        train=(--steps 20 --window 10 --max-resolution 64 --splats 2000)
        default=(--max-resolution 64 --steps 60)
    fi
    step self-test $((90 * scale)) "$bin" self-test "${quick[@]}" --json "$out/self-test.json" \
        "${budget[@]}"
    step bench-train $((90 * scale)) "$bin" bench-train "$dataset" "${train[@]}" --profile \
        --json "$out/bench-train.json"
    step bench-render $((60 * scale)) "$bin" bench-render "${render[@]}" --profile \
        --json "$out/bench-render.json"
    step train $((210 * scale)) "$bin" train "$dataset" "${default[@]}" --eval-every 1000 \
        --out "$out/train" "${budget[@]}"
    cat "$out/status.txt"
    exit "$worst"
}

case "${1:-}" in
build)
    set -e
    cargo build --release -p splatforge
    mkdir -p dist
    cp target/release/splatforge dist/splatforge
    strip dist/splatforge
    ls -l dist/splatforge
    ;;
run)
    shift
    run "$@"
    ;;
*) usage ;;
esac
