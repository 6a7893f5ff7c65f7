#!/usr/bin/env bash
# Runs llamalab on the device machine (NVIDIA H200, CUDA, no network), the way a user would.
# Everything the machine lacks travels with the call: .carry/llama.cpp-b11312.tar.gz (the pinned source,
# without docs and model files) and .whl/ (gguf, pydantic and their needs, for Python 3.12).
#   bash benchmarks/device/run.sh build     # doctor + `llamalab build` of the study's builds (CUDA, sm_90)
#   bash benchmarks/device/run.sh study     # plan (dry run), the study, crosscheck, reports, export, logs
#                                           # (RUN_FLAGS="--crosscheck" skips the fit-off reloads to save ~20 s)
#   bash benchmarks/device/run.sh study-bg  # the study stage in its own session, so it may outlast one call (10
#                                           # minutes) while the machine stays warm; call it again to wait for it
#   bash benchmarks/device/run.sh validate  # dry runs vs full loads (tiny and 8B models), CPU-RPC vs CUDA
# At most 8 files come back from a call, so each stage writes at most 7.
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
    # The CUDA build may outlast one call (10 minutes): it runs in its own session and survives the call's end
    # while the machine stays warm; calling this stage again waits for the same build.
    work=/tmp/llamalab-build; mkdir -p "$work"
    if [ ! -f "$work/pid" ] || ! kill -0 "$(cat "$work/pid")" 2>/dev/null; then
      if [ ! -f "$work/rc" ]; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$work/nvidia-smi.txt" 2>&1
        python3 -m llamalab.cli doctor > "$work/doctor.txt" 2>&1
        setsid bash -c "python3 -m llamalab.cli build '$study' --json > '$work/builds.json' 2> '$work/build.err'; echo \$? > '$work/rc'" &
        echo $! > "$work/pid"
      fi
    fi
    while [ ! -f "$work/rc" ] && [ $(( $(date +%s) - t0 )) -lt ${WAIT_S:-560} ]; do sleep 5; done
    cp "$work"/*.txt "$work"/builds.json "$work"/build.err "$OUT/" 2>/dev/null
    cat "$work/nvidia-smi.txt"; tail -3 "$work/build.err"
    if [ -f "$work/rc" ]; then echo "build finished: rc=$(cat "$work/rc")"; cat "$work/builds.json";
    else echo "build still running after $(( $(date +%s) - t0 )) s: call this stage again"; fi
    ;;
  study-bg)
    work=/tmp/llamalab-study; mkdir -p "$work/out"
    if [ ! -f "$work/rc" ] && { [ ! -f "$work/pid" ] || ! kill -0 "$(cat "$work/pid")" 2>/dev/null; }; then
      setsid bash -c "OUT='$work/out' bash '$0' study > '$work/stdout.txt' 2>&1; echo \$? > '$work/rc'" &
      echo $! > "$work/pid"
    fi
    while [ ! -f "$work/rc" ] && [ $(( $(date +%s) - t0 )) -lt ${WAIT_S:-560} ]; do sleep 5; done
    if [ -f "$work/rc" ]; then cp "$work"/out/* "$OUT/" 2>/dev/null; cat "$work/stdout.txt"; echo "study finished: rc=$(cat "$work/rc")"
    else tail -5 "$work/stdout.txt"; tail -3 "$work/out/stderr.txt" 2>/dev/null
      echo "study still running after $(( $(date +%s) - t0 )) s: call this stage again"; fi
    ;;
  study)
    # at most 8 files come back: stderr of every step goes to one file
    ll plan "$study" --json > "$OUT/plan.json" 2> "$OUT/stderr.txt"; echo "plan rc=$? in $(( $(date +%s) - t0 )) s"
    tail -3 "$OUT/stderr.txt"
    ll run "$study" ${RUN_FLAGS---crosscheck --max-context verify} > /dev/null 2>> "$OUT/stderr.txt"; rc=$?
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
  validate)
    # one file back: everything this stage writes goes into validate.tar.gz
    final_out=$OUT; OUT=/tmp/validate; rm -rf "$OUT"; mkdir -p "$OUT/logs"
    builds='builds=[{name="copies4"},{name="copies1",cmake={GGML_SCHED_MAX_COPIES=1}},{name="no-pp-override",args=["-ot","token_embd\\.weight=CPU"]}]'
    python3 benchmarks/plan_validation.py demo --set 'devices.backend="cuda"' --set "$builds" --label h200 \
      --out-dir "$OUT" --logs "$OUT/logs" 2> "$OUT/validate.err"; echo "tiny rc=$? in $(( $(date +%s) - t0 )) s"
    python3 benchmarks/plan_validation.py "$study" --label h200-8b --out-dir "$OUT" 2>> "$OUT/validate.err"
    echo "8b rc=$? in $(( $(date +%s) - t0 )) s"
    python3 benchmarks/plan_validation.py --cross benchmarks/results/plan-validation-cpu-rpc.json \
      "$OUT/plan-validation-h200.json" > "$OUT/plan-validation-cross.md" 2>> "$OUT/validate.err"
    tail -5 "$OUT/validate.err"; cat "$OUT"/plan-validation-h200*.md "$OUT/plan-validation-cross.md" | head -60
    tar czf "$final_out/validate.tar.gz" -C "$OUT" .
    echo "validate stage: done in $(( $(date +%s) - t0 )) s"
    ;;
esac
