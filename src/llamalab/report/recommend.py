"""The recommendation: one paragraph per study that turns memory (context gained or lost) and speed (single stream
and parallel, with intervals) into advice a user can act on, ending with the exact CMake command or server flags.
Every number in it comes from the stored run. Pure."""

from __future__ import annotations

import shlex

from . import context, speed
from .data import RunData, compute_by_label
from .summary import _study_cmake
from .verdict import study_settings


def action(data: RunData, build: str) -> str:
    """What a user does to get this build's configuration: a CMake command or llama-server flags."""
    spec = data.study_entry("builds", build)
    cmake = _study_cmake(data, build)
    parts = []
    if cmake:
        defs = " ".join(f"-D{k}={'ON' if v is True else 'OFF' if v is False else v}" for k, v in cmake.items())
        parts.append(f"build llama.cpp with `cmake -B build {defs} && cmake --build build --target llama-server`")
    if spec.get("args"):
        parts.append(f"start llama-server with `{shlex.join(spec['args'])}`")
    return " and ".join(parts) or "use llama.cpp's defaults"


def _cmp(comps: list[dict], metric: str, cand: str, setting: str, level: int) -> dict | None:
    return next((c for c in comps if c["metric"] == metric and c["candidate"] == cand and c["setting"] == setting
                 and c["concurrency"] == level), None)


def _ratio_text(c: dict | None) -> str:
    if c is None:
        return "not measured"
    iv = f" [{c['ci_low']:.2f}, {c['ci_high']:.2f}]" if c.get("ci_low") is not None else " (one trial: no interval)"
    return f"{c['ratio']:.2f}×{iv}"


def _pp_on(data: RunData, build: str, setting: str) -> bool | None:
    cfg = context._config(data, build, setting)
    return (cfg or {}).get("ledger", {}).get("pipeline_parallel") if cfg else None


def recommendation(data: RunData) -> str:
    settings = study_settings(data)
    rows = context.rows(data)
    if not rows:
        return "No configuration finished, so there is nothing to recommend yet; see the failures above."
    base = rows[0]["baseline"]
    if not any(_pp_on(data, base, s) for s in settings):
        return (f"Pipeline parallelism was not active in {base} on these devices (one device, a split mode other than "
                "layer, or a backend without events), so its scheduler copies cost nothing here and no build change "
                "is needed.")
    comps = speed.comparisons(data)
    # the candidate: the build that frees the most (context first, then compute MiB) with pipeline parallelism off
    # or with one copy
    scored = []  # (context gained, compute MiB freed over all devices, row)
    for r in rows:
        if r["build"] == base or r.get("over_budget"):
            continue
        base_led = context._config(data, base, r["setting"])["ledger"]
        led = context._config(data, r["build"], r["setting"])["ledger"]
        freed = sum((compute_by_label(base_led).get(d) or 0) - (v or 0) for d, v in compute_by_label(led).items())
        scored.append((r["measured_delta_tokens"] or 0, freed, r))
    if not scored:
        return f"No build of this study used less memory than {base}: keep llama.cpp's defaults."
    gain, freed, r = max(scored, key=lambda x: (x[0], x[1]))
    if gain <= 0 and freed <= 0:
        return f"No build of this study used less memory than {base}: keep llama.cpp's defaults."
    cand, setting = r["build"], r["setting"]
    # builds that give the same in this setting (within the fit's 256-token step; where the context did not move,
    # within 1 MiB of compute): name them as alternatives, and lead with one that needs no rebuild
    same = [x["build"] for g, f, x in scored if x["setting"] == setting and x["build"] != cand
            and (abs(g - gain) <= 256 if gain > 0 else (g == gain and abs(f - freed) <= 1.0))]
    runtime = [b for b in [cand, *same] if not _study_cmake(data, b)]
    if runtime and runtime[0] != cand:
        same = [cand, *[b for b in same if b != runtime[0]]]
        cand = runtime[0]
        r = next(x for x in rows if x["build"] == cand and x["setting"] == setting)
    levels = sorted({t["concurrency"] for t in data.trials})
    single = _cmp(comps, "output_tps", cand, setting, 1)
    top = max(levels) if levels else 1
    parallel = _cmp(comps, "aggregate_output_tps", cand, setting, top) if top > 1 else None
    n_devices = len(compute_by_label(context._config(data, cand, setting)["ledger"]))
    mem = (f"{gain:+,} tokens of context ({100 * gain / (r['fitted_n_ctx'] - gain):+.0f}%, "
           f"{r['fitted_n_ctx'] - gain:,} → {r['fitted_n_ctx']:,} with {setting})" if gain > 0 else
           f"{freed / max(1, n_devices):,.0f} MiB less compute buffer per device with {setting}"
           + ("" if r.get("budgets_mib") else " (the context did not change: these devices had room for the "
              "model's whole context; set [devices] vram to your cards' free memory to see the context it buys)"))
    single_words = {"no measurable difference": "unchanged", "faster": "faster", "slower": "slower"}
    s_verdict = single_words.get(single["verdict"], single["verdict"]) if single else "not measured"
    text = (f"For one user at a time, {action(data, cand)}: {mem}, generation speed {s_verdict} "
            f"({_ratio_text(single)} vs {base}).")
    if same:
        text += " The same gain comes from " + " or from ".join(f"{alt} ({action(data, alt)})" for alt in same) + "."
    if parallel is None:
        text += (" Parallel requests were not measured, so whether pipeline parallelism pays when several requests "
                 "run at once is open: rerun with --set workload.concurrency=[1,4].")
    elif parallel["verdict"] == "slower":
        text += (f" If you serve {top} or more requests at once, keep the default ({base}): "
                 f"{100 * (1 / parallel['ratio'] - 1):+.0f}% aggregate throughput "
                 f"({cand} runs at {_ratio_text(parallel)} of it).")
    elif parallel["verdict"] == "faster":
        text += (f" It is also faster with {top} parallel requests ({_ratio_text(parallel)} aggregate throughput), "
                 "so it is the better choice for serving too.")
    else:
        text += (f" With {top} parallel requests its aggregate throughput is also no different "
                 f"({_ratio_text(parallel)}), so pipeline parallelism bought nothing measurable here.")
    others = [x for x in rows if x["setting"] != setting and x["build"] == cand and x["measured_delta_tokens"]]
    for o in others:
        text += f" With {o['setting']} the gain is {o['measured_delta_tokens']:+,} tokens."
    return text


def as_json(data: RunData) -> dict:
    return {"context": context.rows(data), "recommendation": recommendation(data)}
