"""Two stored runs side by side: the configurations (build × setting) both hold, compared in memory and speed.

Run A is the baseline, run B the candidate, whatever machines they ran on. Devices are matched by position (the
order llama.cpp printed them in), so CUDA0 on one rig lines up with RPC0 on another. Speed ratios are
median(B) / median(A) over trials, with a bootstrap interval and a verdict from `stats`, as within one run.
Pure: takes two RunData, returns a dict and text.
"""

from __future__ import annotations

from ...core import stats
from ..data import RunData, compute_by_label, host_compute
from . import speed, tables


def _model(d: RunData) -> dict:
    return d.model


def _llama(d: RunData) -> dict:
    return (d.system or {}).get("llama_cpp") or {}


def _side(d: RunData) -> dict:
    m = _model(d)
    src = _llama(d)
    return {"run_id": d.id, "study": d.run.get("study"), "host": d.run.get("host"), "status": d.run.get("status"),
            "started": d.run.get("started"), "model": m.get("name") or m.get("path"),
            "model_fingerprint": m.get("fingerprint"), "llama_cpp": src.get("version"),
            "llama_cpp_commit": src.get("commit"), "cpu": (d.system or {}).get("cpu"),
            "gpus": [g.get("name") for g in (d.system or {}).get("gpus") or []]}


def _keys(d: RunData) -> list[tuple[str, str]]:
    """The configurations a run measured (a ledger or trials), in study order."""
    order = tables.config_order(d)
    seen = {(c["build"], c["setting"]) for c in d.configs if c["status"] == "ok" and c.get("ledger")}
    seen |= {(t["build"], t["setting"]) for t in d.trials}
    return sorted(seen, key=lambda k: (order.get(k, 1 << 30), k))


def _delta(a, b):
    return None if a is None or b is None else round(b - a, 2)


def _ratio_or_none(a, b):
    return None if a in (None, 0) or b is None else round(b / a, 4)


def _memory(la: dict | None, lb: dict | None) -> dict:
    ca = compute_by_label(la) if la else {}
    cb = compute_by_label(lb) if lb else {}
    la_names, lb_names = list(ca), list(cb)
    devices = []
    for i in range(max(len(la_names), len(lb_names))):
        na = la_names[i] if i < len(la_names) else None
        nb = lb_names[i] if i < len(lb_names) else None
        a, b = ca.get(na) if na else None, cb.get(nb) if nb else None
        label = " / ".join(dict.fromkeys(n for n in (na, nb) if n))  # "RPC0", or "RPC0 / CUDA0" across backends
        devices.append({"position": i, "device": label, "a_mib": a, "b_mib": b, "delta_mib": _delta(a, b)})
    ha = host_compute(la) if la else None
    hb = host_compute(lb) if lb else None
    ctx_a = (la or {}).get("n_ctx")
    ctx_b = (lb or {}).get("n_ctx")
    return {
        "compute": devices,
        "compute_host": {"a_mib": ha, "b_mib": hb, "delta_mib": _delta(ha, hb)},
        "n_ctx": {"a": ctx_a, "b": ctx_b, "delta": None if ctx_a is None or ctx_b is None else ctx_b - ctx_a,
                  "ratio": _ratio_or_none(ctx_a, ctx_b)},
        "sched_copies": {"a": (la or {}).get("sched_copies"), "b": (lb or {}).get("sched_copies")},
        "pipeline_parallel": {"a": (la or {}).get("pipeline_parallel"), "b": (lb or {}).get("pipeline_parallel")},
    }


def _cells(d: RunData, build: str, setting: str) -> dict[tuple[int, int, int], speed.Cell]:
    """(prompt tokens, output tokens, level) → the trials of one configuration there."""
    return {(k[2], k[3], k[4]): c for k, c in speed.cells(d).items() if k[0] == build and k[1] == setting}


def _workload(d: RunData) -> str:
    cells = ", ".join(f"{p:,}+{o:,}" for p, o in d.cells) or "none"
    return f"{cells} tokens per request, output {d.output_mode}"


def _speed(a: RunData, b: RunData, build: str, setting: str, threshold: float, seed: int,
           n_resamples: int) -> list[dict]:
    """Speed of one configuration in A and B, cell by cell. Cells measured with the same workload and level are
    compared; a level where each run measured one other cell gets rows with no ratio ("not comparable", and
    why); so does a differing output mode, and a foreign CPU load that differs beyond speed.FOREIGN_LOAD_GAP
    keeps the ratio but gives no verdict."""
    ca, cb = _cells(a, build, setting), _cells(b, build, setting)
    pairs = [(k, k) for k in sorted(set(ca) & set(cb))]
    for level in sorted({k[2] for k in ca} & {k[2] for k in cb}):
        only_a = [k for k in ca if k[2] == level and k not in cb]
        only_b = [k for k in cb if k[2] == level and k not in ca]
        if len(only_a) == 1 and len(only_b) == 1:
            pairs.append((only_a[0], only_b[0]))
    mode = (None if a.output_mode == b.output_mode else
            f"output mode differs ({a.output_mode} in A, {b.output_mode} in B)")
    out = []
    for ka, kb in sorted(pairs, key=lambda x: (x[0][2], x[0])):
        xa, xb = ca[ka], cb[kb]
        unlike = None if ka == kb else (f"workload differs: {ka[0]:,}+{ka[1]:,} tokens per request in A, "
                                        f"{kb[0]:,}+{kb[1]:,} in B")
        unlike = unlike or mode
        for m in speed.METRICS:
            ax, _ = xa.samples(m.name)
            bx, _ = xb.samples(m.name)
            if not ax or not bx:
                continue
            r = stats.ratio(ax, bx, seed=seed, n_resamples=n_resamples)
            why = unlike or speed.comparable(xa.foreign_load, xb.foreign_load)
            out.append({
                "metric": m.name, "concurrency": ka[2], "prompt_tokens": ka[0], "output_tokens": ka[1],
                "b_prompt_tokens": kb[0], "b_output_tokens": kb[1],
                "a_median": round(stats.summarize(ax).median, 3),
                "b_median": round(stats.summarize(bx).median, 3),
                "ratio": None if unlike else round(r.ratio, 4),
                "ci_low": None if unlike or r.ci_low is None else round(r.ci_low, 4),
                "ci_high": None if unlike or r.ci_high is None else round(r.ci_high, 4), "confidence": r.confidence,
                "n_a": r.n_baseline, "n_b": r.n_candidate, "a_excluded": xa.excluded, "b_excluded": xb.excluded,
                "a_foreign_load": xa.foreign_load, "b_foreign_load": xb.foreign_load,
                "higher_is_better": m.higher_is_better,
                "verdict": speed.NOT_COMPARABLE if why else stats.verdict(r, threshold, m.higher_is_better),
                "reason": why,
            })
    return out


def compare(a: RunData, b: RunData, threshold: float | None = None, *, seed: int = 0,
            n_resamples: int = 10_000) -> dict:
    """A (baseline) against B (candidate) for every build × setting present in both."""
    t = speed.threshold_of(a) if threshold is None else threshold
    ka, kb = _keys(a), _keys(b)
    both = [k for k in ka if k in kb]
    sa, sb = _side(a), _side(b)
    notes = []
    if sa["model_fingerprint"] and sb["model_fingerprint"] and sa["model_fingerprint"] != sb["model_fingerprint"]:
        notes.append(f"the runs used different model files ({sa['model']} and {sb['model']}): memory and speed "
                     "differences include the model's.")
    if sa["llama_cpp_commit"] and sb["llama_cpp_commit"] and sa["llama_cpp_commit"] != sb["llama_cpp_commit"]:
        notes.append(f"the runs used different llama.cpp versions ({sa['llama_cpp']} and {sb['llama_cpp']}).")
    if sa["study"] != sb["study"]:
        notes.append(f"the runs come from different studies ({sa['study']} and {sb['study']}).")
    if not both:
        notes.append("no configuration (build × setting) is present in both runs.")
    if _workload(a) != _workload(b):
        notes.append(f"the runs measured different workloads (A: {_workload(a)}; B: {_workload(b)}): only cells with "
                     "the same prompt and output tokens and output mode are compared; the others are not comparable.")
    configs = []
    for build, setting in both:
        configs.append({
            "build": build, "setting": setting,
            "memory": _memory(a.ledger_for(build, setting), b.ledger_for(build, setting)),
            "speed": _speed(a, b, build, setting, t, seed, n_resamples),
        })
    return {"a": sa, "b": sb, "threshold": t, "notes": notes, "configs": configs,
            "only_in_a": [list(k) for k in ka if k not in kb], "only_in_b": [list(k) for k in kb if k not in ka]}


# ---------------------------------------------------------------- text

def _num(v, nd: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{nd}f}"


def _signed(v, nd: int = 2) -> str:
    if v is None:
        return "–"
    return f"{v:+,}" if isinstance(v, int) else f"{v:+,.{nd}f}"


def markdown(c: dict) -> str:
    a, b = c["a"], c["b"]
    out = [f"# llamalab compare: {a['run_id']} (A) vs {b['run_id']} (B)", ""]
    for tag, s in (("A", a), ("B", b)):
        gpus = ", ".join(s["gpus"]) or "no GPU"
        out.append(f"- {tag}: {s['study']} on {s['host']} ({s['cpu'] or '?'}; {gpus}), llama.cpp "
                   f"{s['llama_cpp'] or '?'}, model {s['model'] or '?'}, {s['status']}, started {s['started']}")
    out.append("")
    for n in c["notes"]:
        out.append(f"> note: {n}")
    if c["notes"]:
        out.append("")
    head = ["Build", "Setting", "Figure", "A", "B", "B − A"]
    body = []
    for cfg in c["configs"]:
        m = cfg["memory"]
        key = [cfg["build"], cfg["setting"]]
        for d in m["compute"]:
            body.append(key + [f"compute {d['device'] or '?'} (MiB)", _num(d["a_mib"]), _num(d["b_mib"]),
                               _signed(d["delta_mib"])])
        h = m["compute_host"]
        body.append(key + ["compute host (MiB)", _num(h["a_mib"]), _num(h["b_mib"]), _signed(h["delta_mib"])])
        n = m["n_ctx"]
        body.append(key + ["context (tokens)", _num(n["a"]), _num(n["b"]), _signed(n["delta"])])
        sc = m["sched_copies"]
        body.append(key + ["sched copies", _num(sc["a"]), _num(sc["b"]), ""])
    if body:
        out += ["## Memory", "", tables.markdown_table(head, body), ""]
    lines = []
    for cfg in c["configs"]:
        for s in cfg["speed"]:
            label = next((m.label for m in speed.METRICS if m.name == s["metric"]), s["metric"])
            where = "single stream" if s["concurrency"] == 1 else f"{s['concurrency']} parallel requests"
            cell = f"{s['prompt_tokens']:,}-token prompts"
            if s["ratio"] is None:
                lines.append(f"- {cfg['build']} × {cfg['setting']}, {label}, {where}: "
                             f"({_num(s['a_median'])} → {_num(s['b_median'])}) — {s['verdict']} ({s['reason']})")
                continue
            r = stats.Ratio(s["ratio"], s["ci_low"], s["ci_high"], s["n_a"], s["n_b"], s["confidence"])
            tail = s["verdict"] + (f" ({s['reason']})" if s.get("reason") else "")
            lines.append(f"- {cfg['build']} × {cfg['setting']}, {label}, {where}, {cell}: B/A "
                         f"{stats.format_ratio(r)} ({_num(s['a_median'])} → {_num(s['b_median'])}) — {tail}")
    if lines:
        out += [f"## Speed (B relative to A; threshold {c['threshold']:.0%})", ""] + lines + [""]
    for tag, keys in (("A", c["only_in_a"]), ("B", c["only_in_b"])):
        if keys:
            out.append(f"Only in {tag}: " + ", ".join(f"{k[0]} × {k[1]}" for k in keys) + ".")
    return "\n".join(out).rstrip() + "\n"
