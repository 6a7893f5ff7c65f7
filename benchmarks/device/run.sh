#!/usr/bin/env bash
# Runs llamalab on the device machine (NVIDIA H200, CUDA, no network), the way a user would.
# Everything the machine lacks travels with the call: .carry/llama.cpp-b11312.tar.gz (the pinned source,
# without docs and model files) and .whl/ (gguf, pydantic and their needs, for Python 3.12).
#   bash benchmarks/device/run.sh build   # doctor + `llamalab build` of the study's builds (CUDA, sm_90)
#   bash benchmarks/device/run.sh study   # plan (dry run), the study, crosscheck, reports, export
set -uo pipefail
stage=${1:?stage: build or study}
study=${STUDY:-benchmarks/h200/study.toml}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LLAMALAB_HOME=${LLAMALAB_HOME:-/tmp/llamalab-home} LLAMALAB_DATA=${LLAMALAB_DATA:-/tmp/llamalab-data}
export LLAMALAB_CUDA_ARCH=${LLAMALAB_CUDA_ARCH:-90} PYTHONUNBUFFERED=1
if [ ! -d /tmp/site/pydantic ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src
ll() { python3 -m llamalab.cli "$@"; }
if [ ! -f "$LLAMALAB_HOME/src/llama.cpp-b11312/.llamalab-source.json" ]; then
  mkdir -p "$LLAMALAB_HOME/src" && tar xzf .carry/llama.cpp-b11312.tar.gz -C "$LLAMALAB_HOME/src" || exit 1
fi
t0=$(date +%s)
case "$stage" in
  build)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
    ll doctor > "$OUT/doctor.txt" 2>&1; cat "$OUT/doctor.txt"
    ll build "$study" --json > "$OUT/builds.json" 2> "$OUT/build.err"; rc=$?
    tail -5 "$OUT/build.err"; cat "$OUT/builds.json"
    echo "build stage: rc=$rc in $(( $(date +%s) - t0 )) s"
    ;;
  study)
    # at most 8 files come back: stderr of every step goes to one file
    ll plan "$study" --json > "$OUT/plan.json" 2> "$OUT/stderr.txt"; echo "plan rc=$? in $(( $(date +%s) - t0 )) s"
    tail -3 "$OUT/stderr.txt"
    ll run "$study" --crosscheck > /dev/null 2>> "$OUT/stderr.txt"; rc=$?
    echo "run rc=$rc in $(( $(date +%s) - t0 )) s"; tail -25 "$OUT/stderr.txt"
    ll report --format md -o "$OUT/report.md"
    ll report --format json -o "$OUT/report.json"
    ll report --format html -o "$OUT/report.html"
    run_id=$(python3 -c "import json,sys; print(json.load(open('$OUT/report.json'))['run']['id'])")
    ll export "$run_id" -o "$OUT/export.json"
    tar czf "$OUT/logs.tar.gz" -C "$LLAMALAB_DATA/runs" . 2>/dev/null
    cat "$OUT/report.md" | head -80
    echo "study stage: done in $(( $(date +%s) - t0 )) s"
    ;;
esac
