#!/usr/bin/env bash
# Re-render the four tune reports here from the runs as exported on the H200 (nothing is measured again):
#   bash benchmarks/tune-h200/render.sh
set -euo pipefail
cd "$(dirname "$0")"
db=$(mktemp -d)/r.db
mkdir -p plots
for f in export-8b-exhaustive export-8b-race export-moe-exhaustive export-moe-race; do
  run=$(python3 -c "import json,sys; print(json.load(open('$f.json'))['run_id'])")
  llamalab import "$f.json" --db "$db" > /dev/null
  name=${f#export-}
  llamalab report "$run" --db "$db" --format md -o "report-$name.md"
  llamalab report "$run" --db "$db" --format html -o "report-$name.html" --plots "/tmp/plots-$name"
  cp "/tmp/plots-$name/$run-tune_front.png" "plots/tune-front-$name.png"
done
