#!/usr/bin/env bash
# The GPU figures of BENCHMARKS.md in one go: the self-test, a profiled training benchmark at
# 1080p with 1M splats and the rasterizer benchmark at 1M splats 1080p, each written as JSON
# (and its printout as text) into OUT.
#
#   scripts/gpu-figures.sh build              a stripped release binary in dist/splatforge
#   scripts/gpu-figures.sh run DATASET [OUT]  runs them with dist/splatforge (or $SPLATFORGE);
#                                             OUT defaults to gpu-figures/
#
# DATASET is a capture whose images are 1920 px or more on the long side (the shared
# desk-penguin-opencv: 29 frames of 1920x1080). Meant for a real GPU: on software Vulkan the
# two benchmarks take hours. Exits non-zero when the self-test fails (the benchmarks run
# anyway, their figures are still wanted).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
build)
    cargo build --release -p splatforge
    mkdir -p dist
    cp target/release/splatforge dist/splatforge
    strip dist/splatforge
    ls -l dist/splatforge
    ;;
run)
    dataset="${2:?usage: $0 run DATASET [OUT]}"
    out="${3:-gpu-figures}"
    bin="${SPLATFORGE:-dist/splatforge}"
    mkdir -p "$out"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
    fi
    self_test=0
    "$bin" self-test --json "$out/self-test.json" 2>&1 | tee "$out/self-test.txt" || self_test=$?
    "$bin" bench-train "$dataset" --steps 60 --window 20 --max-resolution 1920 \
        --splats 1000000 --profile --json "$out/bench-train.json" 2>&1 | tee "$out/bench-train.txt"
    "$bin" bench-render --splats 1000000 --sizes 1920x1080 --runs 5 --profile \
        --json "$out/bench-render.json" 2>&1 | tee "$out/bench-render.txt"
    exit "$self_test"
    ;;
*)
    sed -n '2,14p' "$0"
    exit 2
    ;;
esac
