"""The Markdown report: ready to paste into a forum post or a GitHub issue."""

from __future__ import annotations

from ..safetext import plain
from . import context, network, recommend, speed, summary, tables
from .data import RunData


def _throughput(data: RunData) -> str:
    rows = speed.throughput_table(data)
    f = tables._fmt
    head = ["Build", "Setting", "Parallel requests", "Trials", "Aggregate output t/s", "min–max", "Output t/s",
            "TTFT p50 (ms)", "ITL p50 (ms)"]
    body = [[r["build"], r["setting"], f(r["concurrency"]), f(r["n"]), f(r["aggregate_output_tps"]),
             f"{f(r['aggregate_output_tps_min'])}–{f(r['aggregate_output_tps_max'])}", f(r["output_tps"]),
             f(r["ttft_ms_p50"]), f(r["itl_ms_p50"])] for r in rows]
    return tables.markdown_table(head, body)


def render(data: RunData) -> str:
    r = data.run
    out = [f"# llamalab: {r['study']} — run {r['id']}", ""]
    out += ["**Recommendation.** " + recommend.recommendation(data), ""]
    items = dict(summary.system_items(data))
    out.append(f"- llama.cpp {items['llama.cpp']}")
    out.append(f"- machine: {items['CPU']}; GPUs: {items['GPUs']}")
    out.append(f"- model: {items['Model']}")
    out.append(f"- status: {r['status']}, started {r['started']}")
    out.append("")
    level = min((int(t["concurrency"]) for t in data.trials), default=1)
    rows = tables.rows(data, level)
    head, body = tables.table_cells(rows)
    if level != 1:
        out += [f"At {level} parallel requests:", ""]
    out.append(tables.markdown_table(head, body))
    out.append("")
    if len({int(t["concurrency"]) for t in data.trials}) > 1:
        out += ["## Throughput by concurrency", "", _throughput(data), ""]
    builds = summary.build_items(data)
    if builds:
        out += ["## Builds", ""]
        out += [f"- {b['name']}: {b['label']} — CMake `{b['cmake']}`, llama.cpp {b['source']}, {b['status']}"
                for b in builds] + [""]
    missing = summary.not_measured(data)
    if missing:
        out += ["## Not measured", ""] + [f"- {s}" for s in missing] + [""]
    mem = summary.memory_lines(data) + context.sentences(data)
    if mem:
        out += ["## Memory and context", ""] + [f"- {s}" for s in mem] + [""]
    spd = summary.speed_lines(data)
    if spd:
        out += [f"## Speed (ratio of medians, 95% bootstrap interval, threshold {speed.threshold_of(data):.0%})", ""]
        out += [f"- {s}" for s in spd] + [""]
    noise = summary.noise_lines(data)
    fid = summary.fidelity_lines(data)
    if fid or noise:
        out += ["## How far to trust the figures", ""] + [f"- {s}" for s in noise + fid] + [""]
    if network.has_remotes(data):
        out += [network.markdown(data), ""]
    rep = summary.reproduce(data)
    if rep:
        out += ["## How each configuration was run", ""]
        for x in rep:
            env = f"{x['env']} " if x["env"] else ""
            out.append(f"- {x['build']} × {x['setting']}: `{env}llama-server -m MODEL {x['server']}`")
        out.append("")
    out.append("Compute buffers are llama.cpp's own `compute buffer size` lines (MiB); context is the `n_ctx` "
               "the server ran with.")
    return plain("\n".join(out) + "\n")  # labels, names and reasons may hold terminal control sequences
