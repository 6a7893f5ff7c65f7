"""What the numbers say: memory deltas per device and context deltas between builds, per setting."""

from __future__ import annotations

from .data import RunData, compute_by_label, host_compute


def _in_study_order(data: RunData, table: str, column: str) -> list[str]:
    """Names the study file lists in `table`, then any others the stored configurations use."""
    names = [e["name"] for e in data.study.get(table) or [] if isinstance(e, dict) and "name" in e]
    return names + [n for n in dict.fromkeys(c[column] for c in data.configs) if n not in names]


def study_builds(data: RunData) -> list[str]:
    return _in_study_order(data, "builds", "build")


def study_settings(data: RunData) -> list[str]:
    return _in_study_order(data, "settings", "setting") or ["default"]


def memory_comparisons(data: RunData) -> list[dict]:
    """For each setting, each build against the study's first build (llama.cpp's default)."""
    out = []
    builds = study_builds(data)
    for setting in study_settings(data):
        base_name = next((b for b in builds if data.ledger_for(b, setting)), None)
        if base_name is None:
            continue
        base = data.ledger_for(base_name, setting)
        for b in builds:
            if b == base_name or not (led := data.ledger_for(b, setting)):
                continue
            bc, cc = compute_by_label(base), compute_by_label(led)
            per_dev = {d: _delta(cc.get(d), bc.get(d)) for d in bc}
            out.append({
                "setting": setting, "baseline": base_name, "candidate": b,
                "compute_delta_mib": per_dev,
                "compute_host_delta_mib": _delta(host_compute(led), host_compute(base)),
                "baseline_copies": base.get("sched_copies"), "candidate_copies": led.get("sched_copies"),
                "baseline_n_ctx": base.get("n_ctx"), "candidate_n_ctx": led.get("n_ctx"),
                "n_ctx_delta": _delta(led.get("n_ctx"), base.get("n_ctx")),
            })
    return out


def _delta(a, b):
    if a is None or b is None:
        return None
    return round(a - b, 2)


def memory_sentences(data: RunData) -> list[str]:
    lines = []
    for c in memory_comparisons(data):
        devs = ", ".join(f"{d} {_signed(v)} MiB" for d, v in c["compute_delta_mib"].items() if v is not None)
        host = c["compute_host_delta_mib"]
        ctx = c["n_ctx_delta"]
        s = (f"{c['setting']}: {c['candidate']} (sched copies {c['candidate_copies']}) vs {c['baseline']} "
             f"(sched copies {c['baseline_copies']}): compute buffers {devs}")
        if host is not None:
            s += f", host {_signed(host)} MiB"
        if ctx:
            s += f"; context {_signed(ctx, 0)} tokens ({c['baseline_n_ctx']:,} → {c['candidate_n_ctx']:,})"
        lines.append(s + ".")
    return lines


def _signed(v: float, nd: int = 2) -> str:
    if nd == 0:
        return f"{v:+,.0f}"
    return f"{v:+,.{nd}f}"
