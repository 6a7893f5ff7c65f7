#!/usr/bin/env bash
# Re-render every committed benchmark report from its export (nothing is measured again): Markdown, HTML, JSON
# where one is committed, the forum summary (forum.md), and screenshots of each HTML page's first screen at
# 1400×900 (a laptop) and 390×844 (a phone) beside it (Chromium, headless; skipped with a note where it is absent).
#   bash benchmarks/render.sh            # llamalab from .venv/bin (make setup) or PATH
set -euo pipefail
cd "$(dirname "$0")"
LLAMALAB=${LLAMALAB:-$(command -v ../.venv/bin/llamalab || command -v llamalab)}
CHROMIUM=${LLAMALAB_CHROMIUM:-$(command -v chromium || true)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shot() {  # shot PAGE.html SCREENSHOT-STEM: the first screen at both widths
  if [ -z "$CHROMIUM" ]; then echo "no Chromium: $2-*.png not made" >&2; return; fi
  for size in 1400,900 390,844; do
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-extensions \
      --user-data-dir="$work/profile" --window-size="$size" --screenshot="$2-${size%,*}.png" \
      "file://$PWD/$1" 2>/dev/null >/dev/null
  done
}

render() {  # render DIR EXPORT STEM: DIR/STEM.md, .html (+ .json where committed), DIR/STEM-{1400,390}.png
  local dir=$1 export=$2 stem=$3 db="$work/$1-$3.db" run
  run=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['run_id'])" "$dir/$export")
  "$LLAMALAB" import "$dir/$export" --db "$db" > /dev/null
  "$LLAMALAB" report "$run" --db "$db" --format md -o "$dir/$stem.md"
  "$LLAMALAB" report "$run" --db "$db" --format html -o "$dir/$stem.html"
  if [ -f "$dir/$stem.json" ]; then "$LLAMALAB" report "$run" --db "$db" --format json -o "$dir/$stem.json"; fi
  shot "$dir/$stem.html" "$dir/$stem"
  echo "$dir/$stem: $run"
}

render h200 export.json report
"$LLAMALAB" report --db "$work/h200-report.db" --format forum -o h200/forum.md
"$LLAMALAB" report --db "$work/h200-report.db" --plots h200/plots --format md -o "$work/unused.md"
render h100-outputs export.json report
render vulkan-h200 export.json report
render split-modes-h200 export.json report
for name in 8b-exhaustive 8b-race moe-exhaustive moe-race; do
  render tune-h200 "export-$name.json" "report-$name"
  run=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['run_id'])" "tune-h200/export-$name.json")
  "$LLAMALAB" report "$run" --db "$work/tune-h200-report-$name.db" --plots "$work/plots-$name" -o "$work/unused.md"
  cp "$work/plots-$name/$run-tune_front.png" "tune-h200/plots/tune-front-$name.png"
done
