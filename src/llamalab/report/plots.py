"""Plots of a stored run, as matplotlib Figures (Agg canvas, no pyplot state) or PNG / SVG bytes. No file writes.

- `compute_figure`: compute buffer MiB per device (host included) per configuration, grouped bars.
- `context_figure`: the context (n_ctx, tokens) each configuration ran with.
- `throughput_figure`: aggregate output t/s against concurrency per configuration, median with min–max bars.
- `pp_gain_figure`: the pipeline-parallel gain as a heatmap over the workload grid (prompt length × concurrency),
  one panel each for aggregate prompt and output t/s: ratio and interval per cell (`grid.gains`).
- `tune_front_figure`: a tune run's measured configurations, context against generation (and aggregate) t/s,
  with the default, the front and the pick marked.
Each returns None when the run holds nothing to draw.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from . import grid, speed
from .data import RunData, compute_by_label, host_compute
from .verdict import study_builds, study_settings

FORMATS = ("png", "svg")
DPI = 110
COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
          "#64b5cd"]
HOST_COLOR = "#7f7f7f"


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


def compute_figure(data: RunData) -> Figure | None:
    cfgs = _configs(data)
    if not cfgs:
        return None
    devs: list[str] = []
    for _, _, led in cfgs:
        for d in compute_by_label(led):
            if d not in devs:
                devs.append(d)
    series = devs + ["host"]
    fig = _figure(max(6.0, 1.3 * len(cfgs) * max(1, len(series)) * 0.45 + 2), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    for j, name in enumerate(series):
        xs, ys = [], []
        for i, (_, _, led) in enumerate(cfgs):
            v = host_compute(led) if name == "host" else compute_by_label(led).get(name)
            if v is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(v)
        color = HOST_COLOR if name == "host" else COLORS[j % len(COLORS)]
        bars = ax.bar(xs, ys, width=width * 0.95, label=_t(name), color=color)
        ax.bar_label(bars, labels=[f"{y:,.0f}" if y >= 100 else f"{y:,.1f}" for y in ys], fontsize=7, padding=1)
    ax.set_xticks(range(len(cfgs)), [_label(b, s) for b, s, _ in cfgs], fontsize=8)
    ax.set_ylabel("compute buffer (MiB)")
    ax.set_title(_t(f"Compute buffers per device — run {data.id}"), fontsize=10)
    ax.legend(fontsize=8, ncols=min(len(series), 6))
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    return fig


def context_figure(data: RunData) -> Figure | None:
    cfgs = [(b, s, led) for b, s, led in _configs(data) if led.get("n_ctx")]
    if not cfgs:
        return None
    fig = _figure(max(5.0, 1.1 * len(cfgs) + 2), 3.8)
    ax = fig.add_subplot()
    builds = list(dict.fromkeys(b for b, _, _ in cfgs))
    colors = [COLORS[builds.index(b) % len(COLORS)] for b, _, _ in cfgs]
    ys = [led["n_ctx"] for _, _, led in cfgs]
    bars = ax.bar(range(len(cfgs)), ys, color=colors, width=0.6)
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
    for i, (cfg, cell) in enumerate(keys):
        # one line per configuration and workload cell: colour by configuration, marker by prompt length
        rows = [r for r in table if (r["build"], r["setting"], r["prompt_tokens"], r["output_tokens"]) == (*cfg, *cell)]
        # a small sideways offset keeps overlapping interval bars readable
        xs = [levels.index(r["concurrency"]) + (i - (n - 1) / 2) * min(0.06, 0.6 / n) for r in rows]
        ys = [r["aggregate_output_tps"] for r in rows]
        lo = [y - r["aggregate_output_tps_min"] for y, r in zip(ys, rows)]
        hi = [r["aggregate_output_tps_max"] - y for y, r in zip(ys, rows)]
        label = f"{cfg[0]} × {cfg[1]}" + (f", {cell[0]:,}+{cell[1]:,} tokens" if len(cells) > 1 else "")
        ax.errorbar(xs, ys, yerr=[lo, hi], marker=markers[cells.index(cell) % len(markers)], markersize=4,
                    capsize=3, linewidth=1.2, color=COLORS[configs.index(cfg) % len(COLORS)], label=_t(label))
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
    from . import tune

    v = tune.view(data)
    if v is None:
        return None
    by = {m.name: m for m in tune.measures_of(data, v)}
    metrics = [("output_tps", "generation, single stream (tokens/s)")]
    if v.parallel > 1:
        metrics.append(("aggregate_output_tps", f"aggregate output at {v.parallel} requests (tokens/s)"))
    fig = _figure(6.2 * len(metrics), 4.4)
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
            style = dict(marker="s", color="black", markersize=7) if r.build == tune.DEFAULT else dict(
                marker="*" if r.picked else "o", markersize=13 if r.picked else 7,
                color=COLORS[v.rows.index(r) % len(COLORS)])
            filled = len(xs) > 1 or r.build == tune.DEFAULT
            ax.errorbar([r.n_ctx], [y], yerr=[[y - min(xs)], [max(xs) - y]], capsize=3, linestyle="none",
                        markerfacecolor=style["color"] if filled else "white", **style)
            ax.annotate(_t(r.build), (r.n_ctx, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
        front = sorted((p for p in pts if p[2].on_front), key=lambda p: p[0])
        if len(front) > 1:
            ax.plot([p[0] for p in front], [p[1] for p in front], color="#999999", linewidth=1, zorder=0,
                    label="measured front")
        if stage_one:
            ax.plot(stage_one, [0] * len(stage_one), "|", color="#4c72b0", markersize=12, clip_on=False,
                    label="stage one's front (dry runs)")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(_t(f"Tune: context against speed (■ llama.cpp's default, ★ the pick; median, min–max over trials) "
                    f"— run {data.id}"), fontsize=9)
    return fig


def _cmap():
    from matplotlib import colormaps

    return colormaps["RdYlGn"]


PLOTS = {"tune_front": tune_front_figure, "compute": compute_figure, "context": context_figure,
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

