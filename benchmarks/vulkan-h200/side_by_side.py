"""The Vulkan study's figures beside the original study's (two AMD cards, 16 + 12 GB, Vulkan, Qwen3.6 27B
UD-Q5_K_XL, a public forum post summarised in docs/guide-pipeline-parallel.md), from `llamalab report --format json`.

    python3 benchmarks/vulkan-h200/side_by_side.py benchmarks/vulkan-h200/report.json [plan-27b.json]

Prints Markdown: per build × KV setting, graph splits, sched copies, compute per device and host, KV per device, the
fitted context — ours next to the original's (whose post gives compute and context only, in MB as printed, which
llama.cpp means as MiB). With the 27B plan (`llamalab plan --json` of study-27b.toml), its dry-run figures too.
"""

from __future__ import annotations

import json
import sys

# The original study's single-stream figures (first trial of each): compute GPU1 / GPU2 / host, context.
ORIGINAL = {
    ("copies4", "kv-f16-q8_0"): (1022, 910, 364, 88832),
    ("copies1", "kv-f16-q8_0"): (242, 242, 130, 113408),
    ("no-pp-override", "kv-f16-q8_0"): (242, 242, 130, 113408),  # the original's no-PP build was BLAS
    ("copies4", "kv-f16-f16"): (481, 481, 327, 78592),
    ("copies1", "kv-f16-f16"): (219, 219, 105, 87552),
    ("no-pp-override", "kv-f16-f16"): (219, 219, 105, 87552),
}


def _f(x, nd=0) -> str:
    if x is None:
        return "–"
    return f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}"


def rows(doc: dict) -> list[dict]:
    out = []
    for c in doc.get("configs", []):
        led = c.get("ledger") or {}
        if c.get("status") != "ok" or not led:
            continue
        devs = led.get("devices") or {}
        names = sorted(devs)
        host = sum((b.get("compute_mib") or 0) for b in (led.get("host") or {}).values())
        out.append({"build": c["build"], "setting": c["setting"], "splits": led.get("graph_splits"),
                    "splits_tg": led.get("graph_splits_tg"), "copies": led.get("sched_copies"),
                    "compute": [devs[n].get("compute_mib") for n in names], "host": round(host, 2),
                    "kv": [devs[n].get("kv_mib") for n in names], "n_ctx": led.get("n_ctx"), "names": names})
    return out


def plan_rows(plan: dict) -> list[dict]:
    out = []
    for c in plan.get("configs", []):
        if c.get("status") != "ok":
            out.append({"build": c["build"], "setting": c["setting"], "failed": c.get("reason")})
            continue
        devs = c.get("devices") or []  # the dry run's projected table: device order, context = KV + recurrent state
        host = (c.get("host") or {}).get("compute_mib")
        out.append({"build": c["build"], "setting": c["setting"], "copies": c.get("sched_copies"),
                    "splits": c.get("graph_splits"), "compute": [d.get("compute_mib") for d in devs], "host": host,
                    "kv": [d.get("context_mib") for d in devs], "n_ctx": c.get("n_ctx"),
                    "names": [d.get("name") for d in devs]})
    return out


def markdown(doc: dict, plan: dict | None = None) -> str:
    lines = ["| build | KV | graph splits | copies | compute per device (MiB) | compute host | KV per device | "
             "context | original: compute GPU1 / GPU2 / host (MB) | original context |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows(doc):
        o = ORIGINAL.get((r["build"], r["setting"]))
        splits = f"{r['splits']}" + (f" / {r['splits_tg']}" if r["splits_tg"] not in (None, r["splits"]) else "")
        lines.append(
            f"| {r['build']} | {r['setting'].removeprefix('kv-')} | {splits} | {r['copies']} | "
            f"{' / '.join(_f(x, 2) for x in r['compute'])} | {_f(r['host'], 2)} | "
            f"{' / '.join(_f(x, 2) for x in r['kv'])} | {_f(r['n_ctx'])} | "
            + (f"{o[0]} / {o[1]} / {o[2]} | {o[3]:,} |" if o else "– | – |"))
    if plan:
        lines += ["", "The 27B shape (qwen35, Q5_K), dry runs (`llamalab plan`, no weights loaded):", "",
                  "| build | KV | graph splits | copies | compute per device (MiB) | compute host | context memory per "
                  "device | context | original: compute GPU1 / GPU2 / host (MB) | original context |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in plan_rows(plan):
            o = ORIGINAL.get((r["build"], r["setting"]))
            if "failed" in r:
                lines.append(f"| {r['build']} | {r['setting'].removeprefix('kv-')} | failed: {r['failed']} ||||||||")
                continue
            lines.append(
                f"| {r['build']} | {r['setting'].removeprefix('kv-')} | {_f(r['splits'])} | {r['copies']} | "
                f"{' / '.join(_f(x, 2) for x in r['compute'])} | {_f(r['host'], 2)} | "
                f"{' / '.join(_f(x, 2) for x in r['kv'])} | {_f(r['n_ctx'])} | "
                + (f"{o[0]} / {o[1]} / {o[2]} | {o[3]:,} |" if o else "– | – |"))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    doc = json.load(open(argv[0]))
    plan = json.load(open(argv[1])) if len(argv) > 1 else None
    sys.stdout.write(markdown(doc, plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
