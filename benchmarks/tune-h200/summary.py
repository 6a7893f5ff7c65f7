"""What a device session of `llamalab tune` runs answers (issue 44), from the runs' exports alone: per study, the
exhaustive run's pick and the race's (the same?), each stage two's device seconds and trials, the race's share of the
exhaustive run's time, the throughput race's pick with its context beside llama.cpp's default's; and, over the
exhaustive run's own trials, the race replayed under both goals with the device seconds it would have taken (each
loaded configuration's pass as the exhaustive run timed it: its server start and every trial, or up to the end of
its first trial where the race stops it there). Nothing is measured again.

    python benchmarks/tune-h200/summary.py benchmarks/tune-h200/export-*.json            # JSON on stdout
    python benchmarks/tune-h200/summary.py --md export-8b-exhaustive.json export-8b-race.json
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import tempfile
from pathlib import Path

from llamalab.report import data as rdata
from llamalab.report.analysis import tune as rtune
from llamalab.store.db import Store
from llamalab.store.exchange import encode_row
from llamalab.tune import pick as tunepick


def _load(path: Path, db: Path) -> rdata.RunData:
    doc = json.loads(path.read_text(encoding="utf-8"))
    with Store(db) as store:
        run_id = store.restore_run({t: [encode_row(r) for r in rows] for t, rows in doc["tables"].items()})
        return rdata.load(store, run_id)


def _epoch(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


def pass_seconds(data: rdata.RunData) -> dict[str, tuple[float, float]]:
    """Each configuration's pass as the run timed it: (to the end of its first trial, to the end of its last), from
    its start (whole seconds, as stored) and its trials' start and wall times."""
    ends: dict[tuple[str, int], float] = {}
    for t in data.trials:
        key = (str(t["build"]), int(t["trial"]))
        ends[key] = max(ends.get(key, 0.0), float(t["started"]) + float(t["wall_s"] or 0.0))
    out = {}
    for c in data.configs:
        if not c.get("started"):
            continue
        b, t0 = str(c["build"]), _epoch(str(c["started"]))
        mine = sorted((n, e) for (name, n), e in ends.items() if name == b)
        if mine:
            out[b] = (round(mine[0][1] - t0, 1), round(mine[-1][1] - t0, 1))
    return out


def _run(data: rdata.RunData) -> dict:
    v = rtune.view(data)
    assert v is not None, f"{data.id} is no tune"
    doc, s2 = v.doc, v.doc.get("stage2") or {}
    by = {m.name: m for m in rtune.measures_of(data, v)}
    ctx = {r.build: r.n_ctx for r in v.rows}
    label = {r.build: r.label for r in v.rows}
    return {"run_id": data.id, "study": data.run.get("study") or doc.get("name"), "goal": doc.get("goal"),
            "mode": s2.get("mode"), "pick": v.pick.name, "pick_label": label.get(v.pick.name),
            "pick_n_ctx": ctx.get(v.pick.name), "default_n_ctx": ctx.get("default"), "reason": v.pick.reason,
            "tied": list(v.pick.tied), "undecided": v.undecided, "stage2_seconds": s2.get("seconds"),
            "trials": s2.get("trials"), "trials_exhaustive": s2.get("trials_exhaustive"),
            "not_loaded": len(s2.get("not_loaded") or {}), "screened_out": len(s2.get("screened_out") or {}),
            "stage1": {k: (doc.get("stage1") or {}).get(k) for k in ("enumerated", "front", "dry_runs", "seconds",
                                                                        "reused_from", "afresh")},
            "generation_tps": {b: m.median("output_tps") for b, m in by.items()},
            "aggregate_tps": {b: m.median("aggregate_output_tps") for b, m in by.items()}}


def replays(data: rdata.RunData) -> dict:
    """An exhaustive run: the race replayed over its trials under each goal, with the device seconds it would take."""
    v = rtune.view(data)
    assert v is not None and v.rule is not None
    ms = rtune.measures_of(data, v)
    order = [r.build for r in v.rows if r.build != "default"]
    passes = pass_seconds(data)
    out = {"passes_seconds": round(sum(full for _, full in passes.values()), 1)}
    for goal in ("context", "throughput"):
        rule = dataclasses.replace(v.rule, goal=goal)
        rp = tunepick.replay(ms, order, rule, v.repeats)
        loaded = [b for b in passes if b not in rp.not_loaded]
        secs = sum(passes[b][0] if b in rp.ruled else passes[b][1] for b in loaded)
        ctx = {m.name: m.n_ctx for m in ms}
        out[goal] = {"pick": rp.pick.name, "pick_n_ctx": ctx.get(rp.pick.name), "default_n_ctx": ctx.get("default"),
                     "all_trials_pick": rule.pick(ms, v.repeats).name, "trials": rp.trials,
                     "not_loaded": sorted(rp.not_loaded), "ruled_out": sorted(rp.ruled),
                     "passes_seconds": round(secs, 1),
                     "share_of_exhaustive": round(secs / out["passes_seconds"], 2) if out["passes_seconds"] else None}
    return out


def summarize(paths: list[Path]) -> dict:
    studies: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(paths):
            data = _load(p, Path(tmp) / f"{i}.db")
            run = _run(data)
            key = "throughput" if run["goal"] == "throughput" else str(run["mode"])
            entry = studies.setdefault(str(run["study"]), {})
            entry[key] = {**run, "export": p.name}
            if run["mode"] == "exhaustive":
                entry["replayed"] = replays(data)
    for entry in studies.values():
        ex, race = entry.get("exhaustive"), entry.get("race")
        if ex and race:
            entry["race_vs_exhaustive"] = {
                "same_pick": race["pick"] == ex["pick"],
                "stage2_seconds": [race["stage2_seconds"], ex["stage2_seconds"]],
                "share": round(race["stage2_seconds"] / ex["stage2_seconds"], 2) if ex["stage2_seconds"] else None,
                "trials": [race["trials"], ex["trials"]]}
    return studies


def markdown(studies: dict) -> str:
    rows = ["| study | run | goal | pick | context (default's) | stage two | trials |", "|---|---|---|---|---|---|---|"]
    lines = []
    for name, entry in studies.items():
        for key in ("exhaustive", "race", "throughput"):
            r = entry.get(key)
            if r:
                rows.append(f"| {name} | {r['mode']} | {r['goal']} | {r['pick']} ({r['pick_label']}) | "
                            f"{r['pick_n_ctx']:,} ({r['default_n_ctx']:,}) | {r['stage2_seconds']} s | "
                            f"{r['trials']} of {r['trials_exhaustive']} |")
        if "race_vs_exhaustive" in entry:
            c = entry["race_vs_exhaustive"]
            lines.append(f"- {name}: race / exhaustive stage-two time {c['share']} "
                         f"({c['stage2_seconds'][0]} s / {c['stage2_seconds'][1]} s), "
                         + ("the same pick" if c["same_pick"] else "NOT the same pick"))
        for goal, rp in (entry.get("replayed") or {}).items():
            if isinstance(rp, dict):
                lines.append(f"- {name}: the race replayed over the exhaustive trials, goal {goal}: pick {rp['pick']} "
                             f"({rp['pick_n_ctx']:,} tokens; the default {rp['default_n_ctx']:,}; all trials: "
                             f"{rp['all_trials_pick']}), {rp['trials']} trials, {rp['passes_seconds']} s of passes "
                             f"({rp['share_of_exhaustive']} of the exhaustive run's)")
    return "\n".join(rows + [""] + lines) + "\n"


def main(argv: list[str]) -> int:
    md = "--md" in argv
    paths = [Path(a) for a in argv if a != "--md"]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    studies = summarize(paths)
    sys.stdout.write(markdown(studies) if md else json.dumps(studies, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
