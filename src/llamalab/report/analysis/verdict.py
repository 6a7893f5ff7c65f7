"""What the memory numbers say: per device, the model (weights), KV and compute buffers of each build against the
setting's baseline, the weights any configuration moved, and the context difference. Pure."""

from __future__ import annotations

from typing import Literal

from ...llamacpp import argv
from ...logs.ledger import pp_label_of
from ..data import RunData, compute_by_label, device_labels, device_names, host_by_type, host_compute

MOVED_MIB = 0.01  # model buffers print to 0.01 MiB: any larger difference means weights moved


def _in_study_order(data: RunData, table: Literal["builds", "settings"],
                    column: Literal["build", "setting"]) -> list[str]:
    """Names the study file lists in `table`, then any others the stored configurations use."""
    names = data.study_names(table)
    return names + [n for n in dict.fromkeys(c[column] for c in data.configs) if n not in names]


def study_builds(data: RunData) -> list[str]:
    return _in_study_order(data, "builds", "build")


def study_settings(data: RunData) -> list[str]:
    return _in_study_order(data, "settings", "setting") or ["default"]


def by_label(ledger: dict, field: str) -> dict[str, float | None]:
    """A buffer figure (`model_mib`, `kv_mib`, `compute_mib`) per device label, in llama.cpp's device order."""
    names = device_names(ledger)
    return {lab: ledger["devices"][n].get(field) for lab, n in zip(device_labels(names), names)}


def host_sum(ledger: dict, field: str) -> float | None:
    vals = [b.get(field) for b in ledger.get("host", {}).values() if b.get(field) is not None]
    return round(sum(vals), 2) if vals else None


def weights_moved(base: dict, led: dict) -> list[dict]:
    """Where the candidate's model buffers differ from the baseline's: per device (a device one side lacks has no
    weights there) and on the host. Empty when every model buffer is the same: no weight moved."""
    bm, cm = by_label(base, "model_mib"), by_label(led, "model_mib")
    out = []
    for d in list(dict.fromkeys([*bm, *cm])):
        a, b = bm.get(d) or 0.0, cm.get(d) or 0.0
        if abs(a - b) > MOVED_MIB:
            out.append({"where": d, "from_mib": round(a, 2), "to_mib": round(b, 2)})
    ha, hb = host_sum(base, "model_mib") or 0.0, host_sum(led, "model_mib") or 0.0
    if abs(ha - hb) > MOVED_MIB:
        out.append({"where": "host", "from_mib": round(ha, 2), "to_mib": round(hb, 2)})
    return out


def moved_text(moved: list[dict]) -> str:
    """"CUDA1 model 199.34 → 29.34 MiB, host +170.00 MiB"."""
    parts = []
    for m in moved:
        if m["where"] == "host":
            parts.append(f"host {m['to_mib'] - m['from_mib']:+,.2f} MiB")
        else:
            parts.append(f"{m['where']} model {m['from_mib']:,.2f} → {m['to_mib']:,.2f} MiB")
    return ", ".join(parts)


def memory_comparisons(data: RunData) -> list[dict]:
    """For each setting, each build against the study's first build (llama.cpp's default): compute, model and KV
    MiB per device, host compute, the weights it moved, pipeline parallelism on both sides, and the context. Made
    once per run (the decision table asks for it per candidate and setting); not to be changed by the caller."""
    if "memory_comparisons" not in data.memo:
        data.memo["memory_comparisons"] = _memory_comparisons(data)
    return data.memo["memory_comparisons"]


def _memory_comparisons(data: RunData) -> list[dict]:
    out = []
    builds = study_builds(data)
    for setting in study_settings(data):
        ledgers = {b: led for b in builds if (led := data.ledger_for(b, setting))}
        base_name = next((b for b in builds if b in ledgers), None)
        if base_name is None:
            continue
        for b in builds:
            if b == base_name or b not in ledgers:
                continue
            out.append(_comparison(data, setting, (base_name, ledgers[base_name]), (b, ledgers[b])))
    return out


def _comparison(data: RunData, setting: str, baseline: tuple[str, dict], candidate: tuple[str, dict]) -> dict:
    """One build (`candidate`: name, ledger) against the setting's baseline (name, ledger), as
    `memory_comparisons` gives it."""
    base_name, base = baseline
    b, led = candidate
    bc, cc = compute_by_label(base), compute_by_label(led)
    moved = weights_moved(base, led)
    argvs = (data.server_argv(base_name, setting), data.server_argv(b, setting))
    modes = (argv.split_mode(argvs[0]), argv.split_mode(argvs[1]))
    splits = (split_text(argvs[0]), split_text(argvs[1]))
    return {
        "setting": setting, "baseline": base_name, "candidate": b,
        "compute_delta_mib": {d: _delta(cc.get(d), bc.get(d)) for d in bc},
        "compute_host_delta_mib": _delta(host_compute(led), host_compute(base)),
        "model_delta_mib": _deltas(by_label(led, "model_mib"), by_label(base, "model_mib")),
        "kv_delta_mib": _deltas(by_label(led, "kv_mib"), by_label(base, "kv_mib")),
        "weights_moved": moved,
        "weights_moved_text": moved_text(moved) or None,
        # another split mode places the weights differently by design: the move is what it is, not a side
        # effect of an arm meant to change something else
        "baseline_split_mode": modes[0], "candidate_split_mode": modes[1],
        # and so does another tensor split (-ts): a tune candidate's own placement, not a no-op that moved weights
        "baseline_tensor_split": splits[0], "candidate_tensor_split": splits[1],
        "baseline_copies": base.get("sched_copies"), "candidate_copies": led.get("sched_copies"),
        "baseline_pp": pp_label_of(base), "candidate_pp": pp_label_of(led),
        "baseline_n_ctx": base.get("n_ctx"), "candidate_n_ctx": led.get("n_ctx"),
        "n_ctx_delta": _delta(led.get("n_ctx"), base.get("n_ctx")),
        "host_delta_mib": _deltas(host_by_type(led), host_by_type(base)),
        "input_delta_mib": _delta(input_total(led), input_total(base)),
        "baseline_pp_dropped": pp_dropped(base), "candidate_pp_dropped": pp_dropped(led),
        # another engine places the layers by its own rule (ik_llama.cpp: weights and KV per layer)
        **({"baseline_engine": data.engine(base_name), "candidate_engine": data.engine(b)}
           if data.engine(base_name) != data.engine(b) else {}),
    }


def split_text(args: list[str]) -> str | None:
    """The `-ts` value as given ("22,15"), or None where there is none (or all zeros: llama.cpp's own split)."""
    from ...llamacpp.argv import TENSOR_SPLIT

    return argv.value(args, *TENSOR_SPLIT) if sum(argv.tensor_split(args) or []) > 0 else None


def _shares(ts: str | None) -> tuple[float, ...] | None:
    """A `-ts` value as shares of its sum (22,15 and 44,30 are one placement)."""
    parts = argv.tensor_split(["-ts", ts]) if ts else None
    total = sum(parts or [])
    return tuple(round(x / total, 3) for x in parts) if parts and total > 0 else None


def placed_otherwise(c: dict) -> str:
    """Why the candidate's weights sit elsewhere by design ("split mode row", "tensor split -ts 22,15 (not
    llama.cpp's by free memory)"), or "" where they moved though neither changed (an override that is no no-op)."""
    if c.get("candidate_engine"):
        return f"another engine, {c['candidate_engine']}, which places the layers by its own rule"
    if c["candidate_split_mode"] != c["baseline_split_mode"]:
        return f"split mode {c['candidate_split_mode']}"
    cand, base = c.get("candidate_tensor_split"), c.get("baseline_tensor_split")
    if _shares(cand) != _shares(base):
        free = "llama.cpp's, by free memory"
        return f"tensor split {'-ts ' + cand if cand else free} (not {'-ts ' + base if base else free})"
    return ""


def pp_dropped(ledger: dict) -> str | None:
    """Why llama.cpp dropped pipeline parallelism in this configuration (its retry without it), or None."""
    if not ledger.get("pp_retry"):
        return None
    return ledger.get("pp_dropped_reason") or "the compute buffers did not fit"


def input_total(ledger: dict) -> float | None:
    """MiB of early-2024 graph-input buffers (`CUDA_Host input buffer`), on devices and host; None where none."""
    vals = [b.get("input_mib") for t in ("devices", "host") for b in (ledger.get(t) or {}).values()
            if b.get("input_mib") is not None]
    return round(sum(vals), 2) if vals else None


def _delta(a, b):
    if a is None or b is None:
        return None
    return round(a - b, 2)


def _deltas(cand: dict, base: dict) -> dict[str, float | None]:
    """Per device of either side (a device one side lacks holds nothing there)."""
    return {d: _delta(cand.get(d) or 0.0, base.get(d) or 0.0) if (d in cand or d in base) else None
            for d in dict.fromkeys([*base, *cand])}


def memory_sentences(data: RunData, contexts: dict[tuple[str, str], dict] | None = None) -> list[str]:
    """One sentence per comparison. `contexts` (report.analysis.context's rows by build and setting): where a study
    searched for each configuration's context within every budget, the context is said as that, with llama.cpp's fitted
    figures beside it."""
    lines = []
    contexts = contexts or {}
    for c in memory_comparisons(data):
        parts = [f"{d} {_signed(v)} MiB" for d, v in c["compute_delta_mib"].items() if v is not None]
        host = c["compute_host_delta_mib"]
        if host is not None:
            parts.append(f"host {_signed(host)} MiB")
        ctx = c["n_ctx_delta"]
        s = (f"{c['setting']}: {c['candidate']} vs {c['baseline']} (pipeline parallelism {c['candidate_pp']} vs "
             f"{c['baseline_pp']}): compute buffers " + (", ".join(parts) or "not printed on both sides"))
        for side in ("candidate", "baseline"):
            if c[f"{side}_pp_dropped"]:
                s += (f"; llama.cpp DROPPED pipeline parallelism in {c[side]} (\"compute buffer allocation failed, "
                      f"retrying without pipeline parallelism\": {c[f'{side}_pp_dropped']}), so it ran with pipeline "
                      "parallelism off whatever its build's copies")
        if c["input_delta_mib"]:
            s += f"; graph-input buffers {_signed(c['input_delta_mib'])} MiB"
        kv = {d: v for d, v in c["kv_delta_mib"].items() if v}
        if kv:
            s += "; KV " + ", ".join(f"{d} {_signed(v)} MiB" for d, v in kv.items())
        if c["weights_moved"] and placed_otherwise(c):
            s += f"; a split change: weights placed by {placed_otherwise(c)}: {c['weights_moved_text']}"
        elif c["weights_moved"]:
            s += (f"; WEIGHTS MOVED: {c['weights_moved_text']} — {c['candidate']} is not a no-op: it changes where "
                  "the model's weights live (and so which device computes with them)")
        else:
            s += "; model buffers unchanged on every device (no weight moved)"
        row, base = contexts.get((c["candidate"], c["setting"])), contexts.get((c["baseline"], c["setting"]))
        if row is not None and base is not None and (row.get("budget_fit") or base.get("budget_fit")):
            fitted = f"llama.cpp's fit: {c['baseline_n_ctx']:,} → {c['candidate_n_ctx']:,}" if ctx else ""
            if ctx and c.get("candidate_engine"):
                fitted = (f"ran at {c['baseline_n_ctx']:,}, llama.cpp's fit → {c['candidate_n_ctx']:,}, llamalab's "
                          f"search ({c['candidate_engine']} has no fit)")
            if row["measured_delta_tokens"] is not None:
                s += (f"; context within every budget {_signed(row['measured_delta_tokens'], 0)} tokens "
                      f"({base['n_ctx']:,} → {row['n_ctx']:,}" + (f"; {fitted}" if fitted else "") + ")")
            else:
                s += "; context within every budget unknown" + (f" ({fitted})" if fitted else "")
        elif ctx:
            s += f"; context {_signed(ctx, 0)} tokens ({c['baseline_n_ctx']:,} → {c['candidate_n_ctx']:,})"
        lines.append(s + ".")
    return lines


def _signed(v: float, nd: int = 2) -> str:
    if nd == 0:
        return f"{v:+,.0f}"
    return f"{v:+,.{nd}f}"
