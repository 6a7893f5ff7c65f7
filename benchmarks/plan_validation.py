#!/usr/bin/env python3
"""`llamalab plan` against full loads: every build × setting of a study, dry run and full load in the same device
setup, figure by figure. Runs on any backend the study names (cpu-rpc here; cuda with GGML_CUDA_DEVICES=N on one
GPU). Writes JSON and a Markdown table to benchmarks/results/ (see benchmarks/plan-validation.md).

    LLAMALAB_HOME=/tmp/lhome python benchmarks/plan_validation.py demo --label cpu-rpc
    python benchmarks/plan_validation.py demo --set devices.backend=\\"cuda\\" --label h200
    python benchmarks/plan_validation.py --cross results/plan-validation-cpu-rpc.json results/plan-validation-h200.json

Without --model the study's synthetic model is used: its header-only stand-in for the dry runs, the same model
with weights for the full loads. --cross lines up one run's dry-run figures (e.g. CPU-RPC) against another's
full loads (e.g. H200) and reports the error per figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from llamalab.core.paths import cache_home
from llamalab.models import synthetic as models
from llamalab.plan import check as plancheck
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions, parse_budget_option
from llamalab.setup.progress import StderrProgress
from llamalab.study import spec as studymod

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", nargs="?", default="demo")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--model", type=Path, default=None, help="a GGUF with weights (used for both runs)")
    ap.add_argument("--budget", default=None, help="per-device budgets, e.g. 300MiB,300MiB (else [devices] vram)")
    ap.add_argument("--label", default=None, help="results name (default: the backend)")
    ap.add_argument("--out-dir", type=Path, default=HERE / "results")
    ap.add_argument("--logs", type=Path, default=None, help="keep the llama-server logs here")
    ap.add_argument("--cross", nargs=2, type=Path, metavar=("DRY_JSON", "FULL_JSON"),
                    help="compare the dry runs of one results file with the full loads of another")
    a = ap.parse_args(argv)
    if a.cross:
        dry, full = (json.loads(p.read_text()) for p in a.cross)
        print(plancheck.cross_markdown(dry, full))
        return 0

    st, _ = studymod.load(a.study, a.overrides)
    home = cache_home()
    if a.model:
        dry_model = full_model = a.model
    else:
        shape = models.preset(st.model.preset or "tiny")
        dry_model = models.synthetic(shape, home, data=False)
        full_model = models.synthetic(shape, home)
    progress = StderrProgress()
    budgets = parse_budget_option(a.budget)
    prep = session.prepare(st, RunOptions(home=home, model=dry_model, budgets_mib=budgets), progress)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="plan-validation-") as tmp:
        logs = a.logs or Path(tmp)
        results = plancheck.validate(st, prep, full_model, logs=logs, progress=progress, budgets=budgets)
    label = a.label or prep.backend
    meta = {"title": f"{label}: dry run vs full load", "label": label, "backend": prep.backend,
            "study": st.name, "llama_cpp": f"{prep.source.version} ({prep.source.short_commit})",
            "model": prep.model_info.name or full_model.name, "budgets": budgets,
            "when": time.strftime("%Y-%m-%d"), "seconds": round(time.monotonic() - t0, 1),
            "skipped": prep.skipped, "logs": str(a.logs) if a.logs else None}
    data = plancheck.to_json(results, meta)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    (a.out_dir / f"plan-validation-{label}.json").write_text(json.dumps(data, indent=2))
    md = (f"### {meta['title']}\n\n{meta['backend']} · llama.cpp {meta['llama_cpp']} · model {meta['model']} · "
          f"budgets {budgets or 'none'} · {meta['when']}\n\n" + plancheck.condensed_markdown(data) + "\n"
          + plancheck.summary_markdown(data) + "\n<details><summary>every figure</summary>\n\n"
          + plancheck.markdown(data) + "\n</details>\n")
    (a.out_dir / f"plan-validation-{label}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
