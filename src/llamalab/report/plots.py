"""Plots of a stored run, as matplotlib Figures (Agg canvas, no pyplot state) or PNG / SVG bytes. No file writes.

- `memory_figure`: per device and the host, each configuration's model, KV cache and compute buffers stacked (MiB),
  the share of compute that the scheduler's extra copies take marked, and the context each configuration fits.
- `compute_figure`: compute buffer MiB per device (host included) per configuration, grouped bars.
- `context_figure`: the context (n_ctx, tokens) each configuration ran with.
- `throughput_figure`: aggregate output t/s against concurrency per configuration, median with min–max bars.
- `pp_gain_figure`: the pipeline-parallel gain as a heatmap over the workload grid (prompt length × concurrency),
  one panel each for aggregate prompt and output t/s: ratio and interval per cell (`grid.gains`).
- `tune_front_figure`: a tune run's measured configurations, context against generation (and aggregate) t/s,
  with the default, the front and the pick marked.
Each returns None when the run holds nothing to draw. A build has one colour in every figure (`build_colors`),
from Okabe and Ito's colour-blind-safe palette; speed axes are zoomed to the data, never pinned at 0.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from ..tune.records import DEFAULT
from .analysis import grid, speed
from .analysis.verdict import by_label, host_sum, study_builds, study_settings
from .data import RunData, compute_by_label, host_compute

FORMATS = ("png", "svg")
DPI = 110
# Okabe & Ito (2008), "Color Universal Design": told apart with every common colour-vision deficiency
COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"]
HATCHES = ["", "//", "..", "xx", "\\\\", "++"]  # one per setting, where a figure shows several


def _t(s: object) -> str:
    """Text for matplotlib: `$` would start mathtext."""
    return str(s).replace("$", r"\$")


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _configs(data: RunData) -> list[tuple[str, str, dict]]:
    """(build, setting, ledger) for every configuration with a ledger, in study order."""
    out = []
    builds = study_builds(data)
    settings = study_settings(data)
    seen = {(c["build"], c["setting"]) for c in data.ok_configs()}
    order = [(b, s) for b in builds for s in settings if (b, s) in seen]
    order += sorted(k for k in seen if k not in order)
    for b, s in order:
        led = data.ledger_for(b, s)
        if led:
            out.append((b, s, led))
    return out


def _label(build: str, setting: str) -> str:
    return f"{_t(build)}\n{_t(setting)}"


def build_colors(data: RunData) -> dict[str, str]:
    """One colour per build, in study order (then any build the store holds that the study does not name)."""
    names = list(dict.fromkeys([*study_builds(data), *(c["build"] for c in data.configs),
                                *(t["build"] for t in data.trials)]))
    return {b: COLORS[i % len(COLORS)] for i, b in enumerate(names)}


def _tint(color: str, share: float) -> tuple[float, float, float]:
    """`color` mixed with white: `share` of the colour left."""
    rgb = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return (1 - share * (1 - rgb[0]), 1 - share * (1 - rgb[1]), 1 - share * (1 - rgb[2]))


MEMORY_PARTS = (("model_mib", "model", 0.3), ("kv_mib", "KV cache", 0.6), ("compute_mib", "compute", 1.0))


def memory_bars(data: RunData) -> list[dict]:
    """What `memory_figure` draws (and its alt text says), one row per configuration — a tune run's shown ones
    (`tune_shown`) — made once per run: per place (each device, then "host") its model, KV and compute MiB, and the
    compute the scheduler's extra copies hold — over the compute of a configuration of the same setting and place
    with one copy or pipeline parallelism off."""
    if "memory_bars" not in data.memo:
        data.memo["memory_bars"] = _memory_bars(data)
    return data.memo["memory_bars"]


def _memory_bars(data: RunData) -> list[dict]:
    rows: list[dict[str, Any]] = []
    shown = tune_shown(data)
    for b, s, led in _configs(data):
        if shown is not None and b not in shown:
            continue
        per = {k: by_label(led, k) for k, _, _ in MEMORY_PARTS}
        places = {d: {k: per[k].get(d) or 0.0 for k in per} for d in compute_by_label(led)}
        places["host"] = {k: host_sum(led, k) or 0.0 for k in per}
        rows.append({"build": b, "setting": s, "places": places, "n_ctx": led.get("n_ctx"),
                     "copies": led.get("sched_copies"), "pp": bool(led.get("pipeline_parallel"))})
    for r in rows:
        # a tune run's candidates differ in batch, KV and context as well: no share of theirs is the copies' alone
        one = [x for x in rows if x["setting"] == r["setting"] and (x["copies"] == 1 or not x["pp"])
               and _same_shape(data, x, r)] if shown is None else []
        for place, parts in r["places"].items():
            ref = [x["places"][place]["compute_mib"] for x in one if place in x["places"]]
            extra = parts["compute_mib"] - min(ref) if ref and r["pp"] and (r["copies"] or 1) > 1 else 0.0
            parts["copies_mib"] = max(0.0, extra)
    return rows


SHAPE_FLAGS = ("-ub", "-b", "-ctk", "-ctv", "-np", "-fa")  # what sizes a compute buffer besides the copies


def _same_shape(data: RunData, a: dict, b: dict) -> bool:
    """Whether two configurations' compute buffers differ only by the scheduler's copies: the same batch, KV types,
    slots and flash attention (a tune run's candidates differ in those, and their compute with them)."""
    from ..llamacpp import argv, flags

    x, y = data.server_argv(a["build"], a["setting"]), data.server_argv(b["build"], b["setting"])
    return all(argv.value(x, *flags.names(f)) == argv.value(y, *flags.names(f)) for f in SHAPE_FLAGS)


def tune_shown(data: RunData) -> list[str] | None:
    """A tune run's configurations worth a row (`tune.shown`: the default, the pick, the front with the most
    context; None for any other run: every configuration)."""
    from .analysis import tune

    v = tune.view(data)
    if v is None:
        return None
    return [r.build for r in tune.shown(v)]


def memory_alt(data: RunData) -> str:
    """The memory figure in words (its alt text): each configuration's compute per place and its context."""
    parts = []
    for r in memory_bars(data):
        places = ", ".join(f"{p} {v['compute_mib']:,.0f}" + (f" (copies {v['copies_mib']:,.0f})" if v["copies_mib"]
                                                             else "") for p, v in r["places"].items())
        ctx = f"{r['n_ctx']:,} tokens" if r["n_ctx"] else "context unknown"
        parts.append(f"{r['build']} × {r['setting']}: compute MiB {places}; {ctx}")
    return "Memory per device, model, KV cache and compute stacked. " + "; ".join(parts) + "."


def _thousands(ax) -> None:
    """An x axis from 0 with at most four ticks, written 12,000."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.set_xlim(left=0)
    ax.xaxis.set_major_locator(MaxNLocator(4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.tick_params(labelsize=7)
    ax.grid(axis="x", alpha=0.3)


def memory_figure(data: RunData) -> Figure | None:
    rows = memory_bars(data)
    if not rows:
        return None
    colors = build_colors(data)
    places = list(dict.fromkeys(p for r in rows for p in r["places"]))
    n = len(rows)
    fig = _figure(12.0, min(1.3 + 0.32 * n, 7.0))
    axes = fig.subplots(1, len(places) + 1, sharey=True,
                        gridspec_kw={"width_ratios": [3] * len(places) + [2]})
    ys = list(range(n))[::-1]  # the study's first configuration on top
    for ax, place in zip(axes, places):
        for y, r in zip(ys, rows):
            parts = r["places"].get(place)
            if parts is None:
                continue
            left = 0.0
            for key, _, share in MEMORY_PARTS:
                v = parts[key]
                ax.barh(y, v, left=left, height=0.7, color=_tint(colors[r["build"]], share),
                        edgecolor="white", linewidth=0.5)
                left += v
            if parts["copies_mib"] > 0.5:  # the copies' share: the right end of the compute segment, hatched
                ax.barh(y, parts["copies_mib"], left=left - parts["copies_mib"], height=0.7, color="none",
                        edgecolor="white", hatch="////", linewidth=0)
            text = f"{parts['compute_mib']:,.0f}" + (f" (+{parts['copies_mib']:,.0f} copies)"
                                                    if parts["copies_mib"] > 0.5 else "")
            ax.text(left, y, " " + text, va="center", fontsize=7)
        ax.set_title(_t(place), fontsize=9)
        ax.set_xlabel("MiB", fontsize=8)
        ax.margins(x=0.45)
        _thousands(ax)
    ax = axes[-1]
    for y, r in zip(ys, rows):
        if r["n_ctx"]:
            ax.barh(y, r["n_ctx"], height=0.7, color=colors[r["build"]])
            ax.text(r["n_ctx"], y, f" {r['n_ctx']:,}", va="center", fontsize=7)
    ax.set_title("context (tokens)", fontsize=9)
    ax.margins(x=0.35)
    _thousands(ax)
    axes[0].set_yticks(ys, [_t(f"{r['build']} × {r['setting']}") for r in rows], fontsize=8)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=_tint("#555555", share), label=label) for _, label, share in MEMORY_PARTS]
    handles.append(Patch(facecolor="#555555", edgecolor="white", hatch="////", label="compute of the extra copies"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=7, frameon=False)
    fig.suptitle(_t(f"Memory per device: model, KV cache and compute (MiB; the label: compute), and the context "
                    f"each configuration fits — run {data.id}"), fontsize=9)
    return fig


def compute_figure(data: RunData) -> Figure | None:
    """Grouped bars: a group per device (and the host), a bar per configuration, coloured by its build and hatched
    by its setting."""
    cfgs = _configs(data)
    if not cfgs:
        return None
    devs: list[str] = []
    for _, _, led in cfgs:
        for d in compute_by_label(led):
            if d not in devs:
                devs.append(d)
    places = devs + ["host"]
    colors = build_colors(data)
    settings = list(dict.fromkeys(s for _, s, _ in cfgs))
    fig = _figure(max(6.0, 0.45 * len(cfgs) * len(places) + 2.5), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / len(cfgs)
    for j, (b, s, led) in enumerate(cfgs):
        xs, ys = [], []
        for i, place in enumerate(places):
            v = host_compute(led) if place == "host" else compute_by_label(led).get(place)
            if v is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(v)
        bars = ax.bar(xs, ys, width=width * 0.95, label=_t(f"{b} × {s}"), color=colors[b],
                      hatch=HATCHES[settings.index(s) % len(HATCHES)], edgecolor="white", linewidth=0.5)
        ax.bar_label(bars, labels=[f"{y:,.0f}" if y >= 100 else f"{y:,.1f}" for y in ys], fontsize=7, padding=1)
    ax.set_xticks(range(len(places)), [_t(p) for p in places], fontsize=8)
    ax.set_ylabel("compute buffer (MiB)")
    ax.set_title(_t(f"Compute buffers per device — run {data.id}"), fontsize=10)
    ax.legend(fontsize=7, ncols=min(len(cfgs), 3))
    ax.margins(y=0.2)
    ax.grid(axis="y", alpha=0.3)
    return fig


def context_figure(data: RunData) -> Figure | None:
    cfgs = [(b, s, led) for b, s, led in _configs(data) if led.get("n_ctx")]
    if not cfgs:
        return None
    fig = _figure(max(5.0, 1.1 * len(cfgs) + 2), 3.8)
    ax = fig.add_subplot()
    by_build = build_colors(data)
    settings = list(dict.fromkeys(s for _, s, _ in cfgs))
    ys = [led["n_ctx"] for _, _, led in cfgs]
    bars = ax.bar(range(len(cfgs)), ys, color=[by_build[b] for b, _, _ in cfgs], width=0.6, edgecolor="white",
                  hatch=[HATCHES[settings.index(s) % len(HATCHES)] for _, s, _ in cfgs], linewidth=0.5)
    ax.bar_label(bars, labels=[f"{y:,}" for y in ys], fontsize=8, padding=1)
    ax.set_xticks(range(len(cfgs)), [_label(b, s) for b, s, _ in cfgs], fontsize=8)
    ax.set_ylabel("context (tokens)")
    ax.set_title(_t(f"Context each configuration ran with — run {data.id}"), fontsize=10)
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    return fig


def throughput_figure(data: RunData) -> Figure | None:
    table = [r for r in speed.throughput_table(data) if r["aggregate_output_tps"] is not None]
    if not table:
        return None
    configs = list(dict.fromkeys((r["build"], r["setting"]) for r in table))
    cells = sorted({(r["prompt_tokens"], r["output_tokens"]) for r in table})
    keys = [(c, cell) for c in configs for cell in cells
            if any((r["build"], r["setting"], r["prompt_tokens"], r["output_tokens"]) == (*c, *cell) for r in table)]
    levels = sorted({r["concurrency"] for r in table})
    n = len(keys)
    fig = _figure(7.0 if len(cells) == 1 else 9.5, 4.2)
    ax = fig.add_subplot()
    markers = "osD^vP*X"
    colors = build_colors(data)
    settings = list(dict.fromkeys(s for _, s in configs))
    for i, (cfg, cell) in enumerate(keys):
        # one line per configuration and workload cell: colour by build, line style by setting, marker by prompt
        rows = [r for r in table if (r["build"], r["setting"], r["prompt_tokens"], r["output_tokens"]) == (*cfg, *cell)]
        # a small sideways offset keeps overlapping interval bars readable
        xs = [levels.index(r["concurrency"]) + (i - (n - 1) / 2) * min(0.06, 0.6 / n) for r in rows]
        ys = [r["aggregate_output_tps"] for r in rows]
        lo = [y - r["aggregate_output_tps_min"] for y, r in zip(ys, rows)]
        hi = [r["aggregate_output_tps_max"] - y for y, r in zip(ys, rows)]
        label = f"{cfg[0]} × {cfg[1]}" + (f", {cell[0]:,}+{cell[1]:,} tokens" if len(cells) > 1 else "")
        ax.errorbar(xs, ys, yerr=[lo, hi], marker=markers[cells.index(cell) % len(markers)], markersize=4,
                    capsize=3, linewidth=1.2, color=colors[cfg[0]], label=_t(label),
                    linestyle=("-", "--", ":", "-.")[settings.index(cfg[1]) % 4])
    ax.set_xticks(range(len(levels)), [str(x) for x in levels])
    ax.set_xlim(-0.5, len(levels) - 0.5)
    ax.set_xlabel("parallel requests")
    ax.set_ylabel("aggregate output (tokens/s)")
    ax.set_title(_t(f"Throughput vs concurrency (median, min–max over trials) — run {data.id}"), fontsize=9)
    if len(cells) > 1:
        ax.set_yscale("log")  # prompt lengths apart by orders of magnitude: each line keeps its shape
        fig.legend(loc="outside right upper", fontsize=7)  # many lines: beside the plot, never over it
    else:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def pp_gain_figure(data: RunData) -> Figure | None:
    p = grid.pair(data)
    rows = grid.gains(data, p) if p else []
    if p is None or not rows or len({(r["prompt_tokens"], r["output_tokens"], r["concurrency"]) for r in rows}) < 2:
        return None
    levels = sorted({r["concurrency"] for r in rows})
    prompts = sorted({(r["prompt_tokens"], r["output_tokens"]) for r in rows})
    many_outputs = len({o for _, o in prompts}) > 1
    ratios = [r["ratio"] for r in rows]
    spread = max(0.1, max(abs(x - 1) for x in ratios) * 1.05)
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1 - spread, vmax=1 + spread)
    fig = _figure(max(6.5, 2.0 + 2.6 * len(levels)), 1.6 + 0.75 * len(prompts))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, name in zip(axes, grid.GAIN_METRICS):
        z = np.full((len(prompts), len(levels)), np.nan)
        sure = np.zeros_like(z, dtype=bool)  # a verdict (pays or costs): full colour; otherwise pale
        for r in rows:
            if r["metric"] == name:
                i, j = prompts.index((r["prompt_tokens"], r["output_tokens"])), levels.index(r["concurrency"])
                z[i, j] = r["ratio"]
                sure[i, j] = r["verdict"] in ("faster", "slower")
        rgba = _cmap()(norm(np.nan_to_num(z, nan=1.0)))
        rgba[~sure, :3] = 1 - 0.3 * (1 - rgba[~sure, :3])
        rgba[np.isnan(z)] = (0.93, 0.93, 0.93, 1.0)
        ax.imshow(rgba, aspect="auto", origin="lower")
        for r in rows:
            if r["metric"] != name:
                continue
            i, j = prompts.index((r["prompt_tokens"], r["output_tokens"])), levels.index(r["concurrency"])
            iv = f"\n[{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if r["ci_low"] is not None else "\n(no interval)"
            mark = {"faster": "pays", "slower": "costs", "no measurable difference": "same",
                    "untested (one trial)": "untested"}.get(r["verdict"],
                                                                                               "not comparable")
            ax.text(j, i, f"{r['ratio']:.2f}×{iv}\n{mark}", ha="center", va="center", fontsize=7,
                    fontweight="bold" if r["verdict"] in ("faster", "slower") else "normal")
        for i in range(len(prompts)):
            for j in range(len(levels)):
                if np.isnan(z[i, j]):
                    ax.text(j, i, "not run", ha="center", va="center", fontsize=7, color="#777777")
        ax.set_xticks(range(len(levels)), [str(lv) for lv in levels])
        ax.set_xlabel("parallel requests")
        ax.set_title(f"aggregate {grid.WORDS[name]} t/s", fontsize=9)
    axes[0].set_yticks(range(len(prompts)), [f"{p_:,}" + (f"+{o:,}" if many_outputs else "") for p_, o in prompts])
    axes[0].set_ylabel("prompt tokens")
    fig.suptitle(_t(f"Pipeline-parallel gain: {p.pp} / {p.no_pp} ({p.setting}; above 1: pipeline parallelism is "
                    f"faster) — run {data.id}"), fontsize=9)
    return fig


def tune_front_figure(data: RunData) -> Figure | None:
    """A tune run: context (x) against single-stream generation t/s (y, median with min–max), and against the
    aggregate at K requests where K > 1; llama.cpp's default as a black square, the measured front joined by a
    line, the pick as a star, configurations stopped after one trial hollow. Stage one's verified front (dry runs
    only, not all run for real) as ticks along the context axis."""
    from .analysis import tune

    v = tune.view(data)
    if v is None:
        return None
    by = {m.name: m for m in tune.measures_of(data, v)}
    metrics = [("output_tps", "generation, single stream (tokens/s)")]
    if v.parallel > 1:
        metrics.append(("aggregate_output_tps", f"aggregate output at {v.parallel} requests (tokens/s)"))
    fig = _figure(6.2 * len(metrics), 4.4)
    colors = build_colors(data)
    stage_one = [c.get("n_ctx") for c in v.doc.get("candidates") or [] if c.get("status") == "front" and c.get("n_ctx")]
    for k, (metric, ylabel) in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), k + 1)
        pts = []
        for r in v.rows:
            m = by.get(r.build)
            xs = (m.samples.get(metric) or []) if m else []
            if not xs:
                continue
            y = float(np.median(xs))
            pts.append((r.n_ctx, y, r))
            style = dict(marker="s", color="black", markersize=7) if r.build == DEFAULT else dict(
                marker="*" if r.picked else "o", markersize=13 if r.picked else 7,
                color=colors.get(r.build, COLORS[v.rows.index(r) % len(COLORS)]))
            filled = len(xs) > 1 or r.build == DEFAULT
            ax.errorbar([r.n_ctx], [y], yerr=[[y - min(xs)], [max(xs) - y]], capsize=3, linestyle="none",
                        markerfacecolor=style["color"] if filled else "white", **style)
            ax.annotate(_t(r.build), (r.n_ctx, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
        front = sorted((p for p in pts if p[2].on_front), key=lambda p: p[0])
        if len(front) > 1:
            ax.plot([p[0] for p in front], [p[1] for p in front], color="#999999", linewidth=1, zorder=0,
                    label="measured front")
        if stage_one:  # along the bottom of the axes, whatever the speed axis shows
            ax.plot(stage_one, [0] * len(stage_one), "|", color="#555555", markersize=12, clip_on=False,
                    transform=ax.get_xaxis_transform(), label="stage one's front (dry runs)")
        ax.margins(y=0.15)  # the speed axis zoomed to the measurements: a 10% difference is a tenth of it
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(_t(f"Tune: context against speed (■ llama.cpp's default, ★ the pick; median, min–max over trials) "
                    f"— run {data.id}"), fontsize=9)
    return fig


def _cmap():
    from matplotlib import colormaps

    return colormaps["RdBu"]  # diverging and colour-blind safe: red costs, blue pays


PLOTS = {"tune_front": tune_front_figure, "memory": memory_figure, "compute": compute_figure, "context": context_figure,
         "throughput": throughput_figure, "pp_gain": pp_gain_figure}


def to_bytes(fig: Figure, fmt: str = "png") -> bytes:
    if fmt not in FORMATS:
        raise ValueError(f"plot format {fmt!r}: use one of {', '.join(FORMATS)}")
    buf = io.BytesIO()
    meta = {"Date": None} if fmt == "svg" else {"Software": None}
    with rc_context({"svg.hashsalt": "llamalab"}):  # the same run gives the same SVG bytes
        fig.savefig(buf, format=fmt, metadata=meta)
    return buf.getvalue()


def figures(data: RunData) -> dict[str, Figure]:
    """Every plot this run has data for, by name."""
    out = {}
    for name, make in PLOTS.items():
        fig = make(data)
        if fig is not None:
            out[name] = fig
    return out


def render(data: RunData, formats: tuple[str, ...] = FORMATS) -> dict[str, bytes]:
    """{"compute.png": b"…", "compute.svg": b"…", …} for every plot this run has data for."""
    return {f"{name}.{fmt}": to_bytes(fig, fmt) for name, fig in figures(data).items() for fmt in formats}

