"""The Markdown report: ready to paste into a forum post or a GitHub issue."""

from __future__ import annotations

from ..safetext import plain
from . import context, grid, network, recommend, speed, summary, tables, tune, versions
from .data import RunData


def _throughput(data: RunData) -> str:
    rows = speed.throughput_table(data)
    f = tables.format_cell
    head = ["Build", "Setting", "Prompt tokens", "Parallel requests", "Trials", "Aggregate output t/s", "min–max",
            "Aggregate prompt t/s", "Output t/s", "TTFT p50 (ms)", "ITL p50 (ms)"]
    body = [[r["build"], r["setting"], f(r["prompt_tokens"]), f(r["concurrency"]), f(r["n"]),
             f(r["aggregate_output_tps"]), f"{f(r['aggregate_output_tps_min'])}–{f(r['aggregate_output_tps_max'])}",
             f(r["aggregate_input_tps"]), f(r["output_tps"]), f(r["ttft_ms_p50"]), f(r["itl_ms_p50"])] for r in rows]
    return tables.markdown_table(head, body)


def decision_tables(data: RunData) -> list[str]:
    """The decision table of every setting (a heading per setting where the study has several)."""
    out = []
    settings = [s for s in recommend.study_settings(data) if recommend.decision_table(data, s)]
    for s in settings:
        rows = recommend.decision_table(data, s)
        if len(settings) > 1:
            out += [f"### {s}", ""]
        out += [tables.markdown_table(*recommend.table_cells(rows)), ""]
    return out


def pp_gain(data: RunData) -> list[str]:
    """Where pipeline parallelism pays: the crossover sentence and the grid of its gain."""
    p = grid.pair(data)
    rows = grid.gains(data, p) if p else []
    if not rows:
        return []
    return ["## Where pipeline parallelism pays", "", grid.crossover(data, rows, p), "",
            tables.markdown_table(*grid.table(rows)), "",
            f"Each cell: {p.pp} / {p.no_pp} in aggregate prompt and output t/s (above 1: pipeline parallelism is "
            "faster), ratio of medians with its 95% bootstrap interval; *pays* and *costs* need the ratio beyond "
            f"the threshold ({speed.threshold_of(data):.0%}) and an interval that excludes 1.", ""]


def versions_section(data: RunData) -> list[str]:
    """Memory and speed per llama.cpp version, where the builds ran more than one."""
    if not versions.applies(data):
        return []
    rows = versions.rows(data)
    return ["## Versions", "",
            "The same configuration on each llama.cpp the builds ran: compute, KV cache and weights summed over the "
            "devices and the host (MiB, as each version's log prints them), the context it ran with, and speed "
            "(medians; the speed section below has the verdicts).", "",
            tables.markdown_table(*versions.table(rows)), ""] + [f"- {s}" for s in versions.sentences(rows)] + [""]


def render(data: RunData) -> str:
    r = data.run
    out = [f"# llamalab: {r['study']} — run {r['id']}", ""]
    tuned = tune.markdown(data)  # a tune run: the front, the pick and its command are its recommendation
    out += tuned
    if not tuned:
        out += ["**Recommendation.** " + recommend.recommendation(data), ""]
        table = decision_tables(data)
        if table:
            out += ["## Decision by use", ""] + table
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
    if len({int(t["concurrency"]) for t in data.trials}) > 1 or len(data.cells) > 1:
        out += ["## Throughput by concurrency", "", _throughput(data), ""]
    out += pp_gain(data)
    out += versions_section(data)
    builds = summary.build_items(data)
    if builds:
        out += ["## Builds", ""]
        out += [f"- {b['name']}: {b['label']} — CMake `{b['cmake']}`, llama.cpp {b['source']}, {b['status']}"
                for b in builds]
        out += [f"- binaries {v}" for k, v in summary.system_items(data) if k == "Binaries"]
        out += [f"- note: {n}" for n in summary.binary_notes(data)] + [""]
    missing = summary.not_measured(data)
    if missing:
        out += ["## Not measured", ""] + [f"- {s}" for s in missing] + [""]
    inapplicable = summary.not_applicable_lines(data)
    if inapplicable:
        out += ["## Not applicable on this rig", ""] + [f"- {s}" for s in inapplicable] + [""]
    splits = summary.split_table(data)
    if splits:
        out += ["## Graph splits and buffers per device", "",
                "Each configuration as it loaded: llama.cpp's `graph splits` (more splits: more hand-offs between "
                "devices or to the CPU; pipeline parallelism keeps `Copies` copies of every split's inputs), and each "
                "device's compute and KV buffers.", "", tables.markdown_table(*splits), ""]
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
               "the server ran with." + (" " + context.WITHIN_NOTE if context.searched(data) else ""))
    return plain("\n".join(out) + "\n")  # labels, names and reasons may hold terminal control sequences
