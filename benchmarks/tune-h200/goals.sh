#!/usr/bin/env bash
# Issue 44 on the device machine (benchmarks/device/run.sh tune-goals runs it): for each tune study, in one session
# and on the same front, `--exhaustive` (which makes stage one), then raced (stage one reused), then raced with
# `--goal throughput` (stage one reused); after each run its Markdown and HTML reports, the plots and its export; after
# each study a summary of every export so far (benchmarks/tune-h200/summary.py: both picks, each stage two's device
# seconds and trials, the race's share of the exhaustive run's time, the throughput pick's context beside the
# default's, and the race replayed over the exhaustive trials under both goals).
#   OUT=DIR bash benchmarks/tune-h200/goals.sh
# Env: TUNES        the studies, benchmarks/tune-h200/tune-<name>.toml (default: 8b-seedkv moe)
#      THROUGHPUT   which of them get the throughput race too (default: all of TUNES; "" for none: the summary still
#                   replays goal throughput over the exhaustive run's trials, at no device time)
#      TUNE_DIR     where the study files are (default: this folder); TUNE_ARGS: more arguments for every tune
#      LL, PY       the llamalab command and the Python that runs summary.py (default: python3 -m llamalab.cli, python3)
# Files in $OUT (5 for two studies): stderr.txt, tune-goals-summary.json, tune-goals-summary.md, and per study
# tune-goals-<name>.tar.gz (its `tune --json` outputs, reports, exports and plots), written as soon as it is done.
set -uo pipefail
OUT=${OUT:?OUT=DIR: where the files go}
here=$(cd "$(dirname "$0")" && pwd)
TUNES=${TUNES:-8b-seedkv moe}
THROUGHPUT=${THROUGHPUT-$TUNES}
TUNE_DIR=${TUNE_DIR:-$here}
PY=${PY:-python3}
read -r -a LLCMD <<< "${LL:-python3 -m llamalab.cli}"
read -r -a EXTRA <<< "${TUNE_ARGS:-}"
ll() { "${LLCMD[@]}" "$@"; }
work=${GOALS_WORK:-/tmp/tune-goals}
mkdir -p "$OUT" "$work"
t0=$(date +%s)
exports=()
for t in $TUNES; do
  study="$TUNE_DIR/tune-$t.toml"
  [ -f "$study" ] || { echo "no study $study" | tee -a "$OUT/stderr.txt"; continue; }
  dir="$work/$t"; rm -rf "$dir"; mkdir -p "$dir/plots"
  modes="exhaustive race"
  case " $THROUGHPUT " in *" $t "*) modes="$modes throughput" ;; esac
  for mode in $modes; do
    case $mode in
      exhaustive) flags=(--exhaustive) ;;
      race) flags=() ;;
      throughput) flags=(--goal throughput) ;;
    esac
    s=$(date +%s)
    ll tune "$study" "${flags[@]}" "${EXTRA[@]}" --json > "$dir/tune-$t-$mode.json" 2>> "$OUT/stderr.txt"
    echo "tune $t $mode rc=$? in $(( $(date +%s) - s )) s (at $(( $(date +%s) - t0 )) s)"
    grep -E "tune stage|error" "$OUT/stderr.txt" | tail -3
    run_id=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['run_id'])" "$dir/tune-$t-$mode.json" \
             2>/dev/null) || continue
    ll report "$run_id" --format md -o "$dir/report-$t-$mode.md"
    ll report "$run_id" --format html -o "$dir/report-$t-$mode.html" --plots "$dir/plots"
    ll export "$run_id" -o "$dir/export-$t-$mode.json"
    exports+=("$dir/export-$t-$mode.json")
    "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); s=d['search']['stage2']
print('  pick', d['pick']['build'], d['pick']['command']); print('  stage two', s['mode'], s['trials'], 'trials of',
s['trials_exhaustive'], 'in', s['seconds'], 's'); [print('  ', x) for x in d['stages'] + d.get('undecided', [])]" \
      "$dir/tune-$t-$mode.json"
  done
  # what is finished comes back even if the session ends early: this study's files, the summary so far
  (cd "$dir" && tar czf "$OUT/tune-goals-$t.tar.gz" .)
  if [ ${#exports[@]} -gt 0 ]; then
    "$PY" "$here/summary.py" "${exports[@]}" > "$OUT/tune-goals-summary.json" 2>> "$OUT/stderr.txt"
    "$PY" "$here/summary.py" --md "${exports[@]}" > "$OUT/tune-goals-summary.md" 2>> "$OUT/stderr.txt"
  fi
done
cat "$OUT/tune-goals-summary.md" 2>/dev/null
echo "tune-goals: done in $(( $(date +%s) - t0 )) s"
