#!/usr/bin/env bash
# Runs llamalab on the device machine (NVIDIA H200, CUDA, no network), the way a user would.
# Everything the machine lacks travels with the call: .carry/llama.cpp-b11312.tar.gz (the pinned source,
# without docs and model files) and .whl/ (gguf, pydantic and their needs, for Python 3.12).
#   bash benchmarks/device/run.sh build     # doctor + `llamalab build` of the study's builds (CUDA, sm_90)
#   bash benchmarks/device/run.sh study     # plan (dry run), the study, crosscheck, reports, export, logs
#                                           # (RUN_FLAGS="--crosscheck" skips the fit-off reloads to save ~20 s)
#   bash benchmarks/device/run.sh study-bg  # (and vulkan-bg) the study stage in its own session, so it may outlast one call (10
#                                           # minutes) while the machine stays warm; call it again to wait for it
#   bash benchmarks/device/run.sh split-modes-bg  # the study stage on benchmarks/split-modes-h200/study.toml (after
#                                           # `build`: it needs the same two builds), in its own session as study-bg
#   bash benchmarks/device/run.sh validate  # dry runs vs full loads (tiny and 8B models), CPU-RPC vs CUDA
#   bash benchmarks/device/run.sh tune-bg   # after `build`: `llamalab tune` of benchmarks/tune-h200/ (the 8B dense and the
#                                           # 30B-A3B-shape MoE presets, 16 + 12 GiB budgets on two virtual devices) in its
#                                           # own session (call again to wait); the `tune` stage runs it in the call
#   bash benchmarks/device/run.sh vulkan-bg # Vulkan on NVIDIA's driver, in its own session (call again to wait):
#                                           # doctor, the Vulkan build, the PCI-id check, plans (8B and 27B shapes),
#                                           # the study of benchmarks/vulkan-h200/, report, export (the `vulkan` stage;
#                                           # `vulkan-build` makes the build alone). Needs .carry-vk/ (the Vulkan
#                                           # toolchain and GL .debs: bash scripts/vulkan-toolchain.sh --debs .carry-vk --gl)
#   bash benchmarks/device/run.sh tensor-ledger  # issue 18: real `-sm tensor` logs on two virtual CUDA devices (equal
#                                           # shares and -ts 3,1), NVML's per-process figure after each load, and
#                                           # `llamalab inspect` of each; one file back: tensor-ledger.tar.gz (after `build`)
#   bash benchmarks/device/run.sh tune-race # issue 24: each tune-h200 study --exhaustive, then raced on the same front
#   bash benchmarks/device/run.sh tune-goals # issue 44 (after `build`; over 10 minutes: run it in `chain`): the 8B study
#                                           # with f16/q8_0 (tune-8b-seedkv.toml) and the MoE one, each --exhaustive,
#                                           # raced, and raced for --goal throughput on the same front, with a summary
#                                           # (benchmarks/tune-h200/goals.sh: TUNES, THROUGHPUT choose what runs)
#   bash benchmarks/device/run.sh engines-bg # issue 43: `llamalab run engines` on two virtual CUDA devices (sm_90) with the 8B
#                                           # preset and the seed rig's 16 + 12 GiB budgets: llama.cpp (4 copies; no-op -ot)
#                                           # against ik_llama.cpp (1 copy; built with 4), KV f16/q8_0 and f16/f16, in its own
#                                           # session (call again to wait). Needs .carry/ik_llama.cpp-0.1.5.tar.gz (the
#                                           # unpacked pinned ik source with its .llamalab-source.json, without docs, models,
#                                           # media and github-data: tar czf … -C ~/.cache/llamalab/src ik_llama.cpp-0.1.5)
#   COLLECT=split-modes bash benchmarks/device/run.sh chain   # the stages in CHAIN (default: build split-modes
#                                           # tensor-ledger tune) one after another in one session of their own, started
#                                           # by the first call, so the GPU never waits for the next call; each call
#                                           # waits for the stage named in COLLECT and returns its files
# At most 8 files come back from a call, so each stage writes at most 7.
set -uo pipefail
stage=${1:?stage: build, study, split-modes, validate, vulkan-build, vulkan, tune, tune-race, tune-goals, engines or chain (and study-bg, vulkan-bg, split-modes-bg, tune-bg, engines-bg)}
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
# the last run's report (Markdown, JSON), its export and its logs into $OUT; its id in $run_id
last_run_files() {
  ll report --format md -o "$OUT/report.md"
  ll report --format json -o "$OUT/report.json"
  run_id=$(python3 -c "import json; print(json.load(open('$OUT/report.json'))['run']['id'])")
  ll export "$run_id" -o "$OUT/export.json"
  tar czf "$OUT/logs.tar.gz" -C "$LLAMALAB_DATA/runs/$run_id" . 2>/dev/null
}
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
  study-bg|vulkan-bg|split-modes-bg|tune-bg|engines-bg)
    inner=${stage%-bg}; work=/tmp/llamalab-$inner; mkdir -p "$work/out"
    if [ ! -f "$work/rc" ] && { [ ! -f "$work/pid" ] || ! kill -0 "$(cat "$work/pid")" 2>/dev/null; }; then
      setsid bash -c "OUT='$work/out' bash '$0' $inner > '$work/stdout.txt' 2>&1; echo \$? > '$work/rc'" &
      echo $! > "$work/pid"
    fi
    while [ ! -f "$work/rc" ] && [ $(( $(date +%s) - t0 )) -lt ${WAIT_S:-560} ]; do sleep 5; done
    if [ -f "$work/rc" ]; then cp "$work"/out/* "$OUT/" 2>/dev/null; cat "$work/stdout.txt"; echo "$inner finished: rc=$(cat "$work/rc")"
    else tail -5 "$work/stdout.txt"; tail -3 "$work/out/stderr.txt" 2>/dev/null
      echo "$inner still running after $(( $(date +%s) - t0 )) s: call this stage again"; fi
    ;;
  tune)
    # Files back (6): stderr.txt, tune-8b.json, tune-moe.json (`llamalab tune --json`: the search, the front, the pick),
    # report-8b.md, report-moe.md, and tune.tar.gz (both HTML reports with the front's plot, both runs exported, the
    # plots as PNG/SVG). The MoE model (30.2 GiB of Q8_0) is written on first use into $LLAMALAB_HOME/models.
    for t in 8b moe; do
      ll tune "benchmarks/tune-h200/tune-$t.toml" --json > "$OUT/tune-$t.json" 2>> "$OUT/stderr.txt"; rc=$?
      echo "tune $t rc=$rc at $(( $(date +%s) - t0 )) s"; grep -E "tune stage|not measuring|error|warning" "$OUT/stderr.txt" | tail -6
      run_id=$(python3 -c "import json; print(json.load(open('$OUT/tune-$t.json'))['run_id'])" 2>/dev/null) || continue
      mkdir -p /tmp/tune-files/plots
      ll report "$run_id" --format md -o "$OUT/report-$t.md"
      ll report "$run_id" --format html -o "/tmp/tune-files/report-$t.html" --plots /tmp/tune-files/plots
      ll export "$run_id" -o "/tmp/tune-files/export-$t.json"
      sed -n '1,25p' "$OUT/report-$t.md"
    done
    tar czf "$OUT/tune.tar.gz" -C /tmp/tune-files . 2>/dev/null
    echo "tune stage: done in $(( $(date +%s) - t0 )) s"
    ;;
  engines)
    # Issue 43. Files back (6): stderr.txt, builds.json (`llamalab build --json`: each build's seconds and ccache),
    # report.md, report.json, export.json, logs.tar.gz (every server, rpc and search log of the run). ik_llama.cpp's
    # CUDA build (llama-server and llama-perplexity, sm_90, GGML_IQK_FA_ALL_QUANTS=OFF) is its one libggml with the
    # CUDA kernels in it, so its copies-4 variant recompiles that library (ccache's preprocessed mode keeps every
    # file but ggml-backend.cpp where the machine has ccache).
    if [ ! -f "$LLAMALAB_HOME/src/ik_llama.cpp-0.1.5/.llamalab-source.json" ]; then
      tar xzf .carry/ik_llama.cpp-0.1.5.tar.gz -C "$LLAMALAB_HOME/src" || exit 1
    fi
    two='settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]},{name="kv-f16-f16",args=["-ctk","f16","-ctv","f16"]}]'
    sets=(--set 'devices.backend="cuda"' --set 'devices.count=2' --set 'model.preset="8b"'
          --set 'devices.vram=["16GiB","12GiB"]' --set 'server.fit_target_mib=[1024]'
          --set "${ENGINES_SETTINGS:-$two}" --set "workload.repeats=${ENGINES_REPEATS:-2}")
    s=$(date +%s)
    ll build engines "${sets[@]}" --json > "$OUT/builds.json" 2> "$OUT/stderr.txt"
    echo "build rc=$? in $(( $(date +%s) - s )) s"; tail -4 "$OUT/stderr.txt"
    python3 -c "import json; [print(b['build'], b.get('build_seconds'), 's', 'reused' if b.get('reused') else '', b.get('skipped') or '') for b in json.load(open('$OUT/builds.json'))]" 2>/dev/null
    s=$(date +%s)
    ll run engines "${sets[@]}" > /dev/null 2>> "$OUT/stderr.txt"; rc=$?
    echo "run rc=$rc in $(( $(date +%s) - s )) s"; tail -25 "$OUT/stderr.txt"
    last_run_files
    head -60 "$OUT/report.md"
    echo "engines stage: done in $(( $(date +%s) - t0 )) s"
    ;;
  tune-race)
    # Issue 24: each tune twice on the same front — `--exhaustive` (every member with all its trials), then raced
    # (stage one reused from the first) — for the 8B dense and the MoE study. Files back (7): stderr.txt, and per
    # model tune-<t>-exhaustive.json / tune-<t>-race.json (`llamalab tune --json`) and tune-race-<t>.tar.gz (Markdown and
    # HTML reports of its two runs, their exports, the plots so far).
    mkdir -p /tmp/tune-race/plots
    for t in 8b moe; do
      for mode in exhaustive race; do
        flag=$([ $mode = exhaustive ] && echo --exhaustive)
        s=$(date +%s)
        ll tune "benchmarks/tune-h200/tune-$t.toml" $flag --json > "$OUT/tune-$t-$mode.json" 2>> "$OUT/stderr.txt"
        echo "tune $t $mode rc=$? in $(( $(date +%s) - s )) s (at $(( $(date +%s) - t0 )) s)"
        grep -E "tune stage|error" "$OUT/stderr.txt" | tail -3
        run_id=$(python3 -c "import json; print(json.load(open('$OUT/tune-$t-$mode.json'))['run_id'])" 2>/dev/null) || continue
        ll report "$run_id" --format md -o "/tmp/tune-race/report-$t-$mode.md"
        ll report "$run_id" --format html -o "/tmp/tune-race/report-$t-$mode.html" --plots /tmp/tune-race/plots
        ll export "$run_id" -o "/tmp/tune-race/export-$t-$mode.json"
        python3 -c "import json; d=json.load(open('$OUT/tune-$t-$mode.json')); s=d['search']['stage2']; print('  pick', d['pick']['build'], d['pick']['command']); print('  stage two', s['mode'], s['trials'], 'trials of', s['trials_exhaustive'], 'in', s['seconds'], 's'); [print('  ', x) for x in d['stages'] + d.get('undecided', [])]"
      done
      # one archive per model as soon as its pair is done (its reports and exports, and the plots so far), so a call
      # that collects a stage still running, or a session that ends early, takes back what is finished
      (cd /tmp/tune-race && tar czf "$OUT/tune-race-$t.tar.gz" $(ls | grep -- "-$t-") plots 2>/dev/null)
    done
    echo "tune-race stage: done in $(( $(date +%s) - t0 )) s"
    ;;
  tune-goals)
    # Issue 44: benchmarks/tune-h200/goals.sh — per study (TUNES, default "8b-seedkv moe") --exhaustive, raced and
    # raced for throughput on the same front. Files back (5): stderr.txt, tune-goals-summary.json and .md (both picks,
    # stage two's device seconds and trials of each run, the throughput pick's context beside the default's, the race
    # replayed over the exhaustive trials), tune-goals-<study>.tar.gz (its tune outputs, reports, exports, plots).
    OUT="$OUT" LL="python3 -m llamalab.cli" PY=python3 bash benchmarks/tune-h200/goals.sh
    ;;
  study|split-modes)
    # split-modes: the split-modes study (layer with 4 and 1 copies and without pipeline parallelism, tensor, row,
    # none); the same steps and files as `study`
    [ "$stage" = split-modes ] && study=${STUDY:-benchmarks/split-modes-h200/study.toml}
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
  vulkan-build|vulkan)
    # Vulkan on NVIDIA's driver:
    #   vulkan-build: doctor and the Vulkan build alone (in its own session, like the CUDA build: call again to wait)
    #   vulkan:       the build (unless made), the PCI-id check, plans (8B and 27B shapes), the 8B study, report and
    #                 export; `vulkan-bg` runs it in its own session so that it may outlast one call
    # Files back from `vulkan` (7): stderr.txt, plan.json, plan-27b.json, report.md, report.json, export.json, logs.tar.gz.
    # The machine has NVIDIA's Vulkan driver (an ICD file) but no loader, GL libraries, headers or glslc: the GL
    # libraries go into / (as the machine's notes say), the toolchain into a private prefix llamalab builds against.
    vstudy=${VSTUDY:-benchmarks/vulkan-h200/study.toml}
    if [ ! -f /tmp/llamalab-vk-ready ]; then
      for f in .carry-vk/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
      bash scripts/vulkan-toolchain.sh --from .carry-vk > /dev/null || exit 1
      touch /tmp/llamalab-vk-ready
    fi
    export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
    work=/tmp/llamalab-vk-build; mkdir -p "$work"
    if [ "$stage" = vulkan-build ]; then
      if [ ! -f "$work/pid" ] || ! kill -0 "$(cat "$work/pid")" 2>/dev/null; then
        if [ ! -f "$work/rc" ]; then
          ll doctor > "$work/doctor.txt" 2>&1
          setsid bash -c "python3 -m llamalab.cli build '$vstudy' --json > '$work/builds.json' 2> '$work/build.err'; echo \$? > '$work/rc'" &
          echo $! > "$work/pid"
        fi
      fi
      while [ ! -f "$work/rc" ] && [ $(( $(date +%s) - t0 )) -lt ${WAIT_S:-560} ]; do sleep 5; done
      cp "$work/doctor.txt" "$work/build.err" "$work/builds.json" "$OUT/" 2>/dev/null
      grep -E "Vulkan|glslc|vulkan " "$work/doctor.txt"; tail -4 "$work/build.err"
      if [ -f "$work/rc" ]; then
        echo "vulkan build finished: rc=$(cat "$work/rc") after $(( $(date +%s) - t0 )) s in this call"
        python3 -c "import json; [print(b['build'], b.get('build_seconds'), 's', 'reused' if b.get('reused') else '', b.get('skipped') or '') for b in json.load(open('$work/builds.json'))]"
      else echo "vulkan build still running after $(( $(date +%s) - t0 )) s: call this stage again"; fi
      exit 0
    fi
    if [ ! -f "$work/rc" ]; then  # no vulkan-build call before: build here (vulkan-bg gives it its own session)
      if [ -f "$work/pid" ] && kill -0 "$(cat "$work/pid")" 2>/dev/null; then echo "a vulkan-build is running: call vulkan-build again"; exit 1; fi
      ll doctor > "$work/doctor.txt" 2>&1
      python3 -m llamalab.cli build "$vstudy" --json > "$work/builds.json" 2> "$work/build.err"; echo $? > "$work/rc"
      echo "vulkan build: rc=$(cat "$work/rc") in $(( $(date +%s) - t0 )) s"; tail -3 "$work/build.err"
    fi
    [ "$(cat "$work/rc")" = 0 ] || { echo "the vulkan build failed: see build.err"; cp "$work/build.err" "$OUT/"; exit 1; }
    cat "$work/doctor.txt" "$work/build.err" "$work/builds.json" > "$OUT/stderr.txt" 2>/dev/null
    # llama.cpp drops a second device with a PCI id it already uses unless the devices are named: show it
    bin=$(python3 -c "import json; print(json.load(open('$work/builds.json'))[0]['bin_dir'])")
    model=$(ls "$LLAMALAB_HOME"/models/synthetic-8b-*.gguf | grep -v -- -header | head -1)
    for dev in "" "-dev Vulkan0,Vulkan1"; do
      echo "== GGML_VK_VISIBLE_DEVICES=0,0 llama-fit-params $dev" | tee -a "$OUT/stderr.txt"
      GGML_VK_VISIBLE_DEVICES=0,0 timeout 120 "$bin/llama-fit-params" -m "$model" -fa on -lv 4 $dev 2>&1 |
        grep -E "skipping device|using device|breakdown_print: \|   - Vulkan" | sort -u | tee -a "$OUT/stderr.txt"
    done
    ll plan "$vstudy" --json > "$OUT/plan.json" 2>> "$OUT/stderr.txt"; echo "plan (8B) rc=$? in $(( $(date +%s) - t0 )) s"
    ll plan "${VSTUDY27:-benchmarks/vulkan-h200/study-27b.toml}" --json > "$OUT/plan-27b.json" 2>> "$OUT/stderr.txt"
    echo "plan (27B shape, header-only) rc=$? in $(( $(date +%s) - t0 )) s"
    ll run "$vstudy" > /dev/null 2>> "$OUT/stderr.txt"; rc=$?
    echo "run rc=$rc in $(( $(date +%s) - t0 )) s"; tail -15 "$OUT/stderr.txt"
    last_run_files
    python3 benchmarks/vulkan-h200/side_by_side.py "$OUT/report.json" "$OUT/plan-27b.json"
    echo "vulkan stage: done in $(( $(date +%s) - t0 )) s"
    ;;
  chain)
    work=/tmp/llamalab-chain; mkdir -p "$work"
    if [ ! -f "$work/pid" ]; then
      setsid bash -c "for s in ${CHAIN:-build split-modes tensor-ledger tune}; do mkdir -p '$work'/\$s
        OUT='$work'/\$s WAIT_S=86400 bash '$0' \$s > '$work'/\$s.stdout 2>&1; echo \$? > '$work'/\$s.rc; done" &
      echo $! > "$work/pid"
    fi
    want=${COLLECT:?COLLECT=<stage> names the stage whose files this call returns}
    while [ ! -f "$work/$want.rc" ] && [ $(( $(date +%s) - t0 )) -lt ${WAIT_S:-560} ]; do sleep 5; done
    if [ -f "$work/$want.rc" ]; then
      cp "$work/$want"/* "$OUT/" 2>/dev/null; cat "$work/$want.stdout"; echo "$want finished: rc=$(cat "$work/$want.rc")"
    else
      cp "$work/$want"/* "$OUT/" 2>/dev/null  # what the stage has finished so far
      for f in "$work"/*.stdout; do echo "== $f"; tail -4 "$f"; done
      echo "$want still running after $(( $(date +%s) - t0 )) s: call again"
    fi
    ;;
  tensor-ledger)
    # -sm tensor prints its buffers as `Meta() … buffer size`: llamalab attributes them to the devices they span
    # (ledger.split_meta). Here: the CUDA log to check the lines against, and NVML's figure to check the sum.
    work=/tmp/tensor-ledger; rm -rf "$work"; mkdir -p "$work"
    bin=$(python3 -c "import json; print(json.load(open('/tmp/llamalab-build/builds.json'))[0]['bin_dir'])") ||
      { echo "run the build stage first"; exit 1; }
    model=$(python3 -c "import os; from pathlib import Path; from llamalab.llamacpp import models
print(models.synthetic(models.preset('8b'), Path(os.environ['LLAMALAB_HOME'])))") || exit 1
    for ts in "" "3,1"; do
      name=tensor${ts:+-ts${ts/,/}}
      GGML_CUDA_DEVICES=2 "$bin/llama-server" -m "$model" -lv 4 -fa on -ngl 999 -sm tensor ${ts:+-ts $ts} \
        -c ${TENSOR_CTX:-32768} -np 4 -kvu --host 127.0.0.1 --port 18093 > "$work/$name.log" 2>&1 &
      pid=$!
      for _ in $(seq 1 300); do
        python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:18093/health', timeout=2)" \
          2> /dev/null && break
        kill -0 $pid 2>/dev/null || break; sleep 1
      done
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$work/$name.nvml.txt" 2>&1
      echo "llama-server pid $pid" >> "$work/$name.nvml.txt"
      kill -INT $pid 2>/dev/null; wait $pid
      ll inspect --json ${ts:+--tensor-split $ts} "$work/$name.log" > "$work/$name.ledger.json"
      ll inspect ${ts:+--tensor-split $ts} "$work/$name.log" > "$work/$name.inspect.txt"
      echo "== $name"; grep -E "Meta|creating a Meta|- device|sched copies" "$work/$name.log" | head -12
      cat "$work/$name.nvml.txt"; head -20 "$work/$name.inspect.txt"
    done
    tar czf "$OUT/tensor-ledger.tar.gz" -C "$work" .
    echo "tensor-ledger stage: done in $(( $(date +%s) - t0 )) s"
    ;;
  validate)
    # one file back: everything this stage writes goes into validate.tar.gz
    final_out=$OUT; OUT=/tmp/validate; rm -rf "$OUT"; mkdir -p "$OUT/logs"
    builds='builds=[{name="copies4"},{name="copies1",cmake={GGML_SCHED_MAX_COPIES=1}},{name="no-pp-override",args=["-ot","no_such_tensor=CPU"]}]'
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
