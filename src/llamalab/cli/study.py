"""`llamalab demo`, `run` and `build`: a study built, run and shown as the seed table, the verdicts and the
decision table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn

import click

from .app import CONTEXT, EXIT_NOTHING_MEASURED, EXIT_SOME_FAILED, cli
from .common import (
    DOWNLOAD_HELP,
    LLAMA_BIN_HELP,
    MODEL_HELP,
    TRUST_HELP,
    bin_override,
    host_overrides,
    load_study,
    model_arg,
    new_progress,
    open_store,
    run_options,
    study_options,
)


def _run_study(ref: str, *, overrides, llama_cpp, llama_bin, db, as_json, resume, fresh, crosscheck, max_context,
               budget_context, host, trust, model=None, budget=None) -> None:
    from ..store.db import Store

    overrides = list(overrides) + bin_override(llama_bin)
    if host:
        overrides += host_overrides(host)
    st, text = load_study(ref, overrides, trust)
    # imported only now: a mistake in the command line or the study is reported without loading the run loop, and
    # the report modules (scipy) load after the run
    from ..run import runner
    from ..setup import prepare as session
    opts = run_options(llama_cpp=llama_cpp, db=db, model=model, budget=budget, resume=resume, fresh=fresh,
                    crosscheck=crosscheck, max_context=max_context, budget_context=budget_context)
    open_store(opts, resume)
    progress = new_progress()
    try:
        prep = session.prepare(st, opts, progress)
        run_id = runner.execute(prep, text, opts, progress)
    finally:
        progress.close()
    from ..core.write import atomic_write
    from ..report import data as rdata
    from ..report import markdown
    from ..report.analysis import tables

    with Store(opts.db) as store:  # the report and the table need the requests' speed figures only
        data = rdata.load(store, run_id, requests=False)
        failed, total, measured = runner.run_outcome(store, run_id)
    atomic_write(opts.runs_dir / run_id / "report.md", markdown.render(data))
    if as_json:
        click.echo(json.dumps(tables.rows(data), indent=2))
    else:
        _print_table(data)
        click.echo(f"\nrun {run_id}: report in {opts.runs_dir / run_id / 'report.md'} "
                   f"(re-render with `llamalab report {run_id}`)", err=True)
    if not measured:
        _nothing_measured(data, run_id, failed, opts.runs_dir / run_id / "logs")
    if failed:
        click.echo(f"warning: {len(failed)} of {total} configuration(s) failed: {'; '.join(failed[:3])}"
                   f"{' …' if len(failed) > 3 else ''}. The rest were measured (exit code "
                   f"{EXIT_SOME_FAILED}).", err=True)
        sys.exit(EXIT_SOME_FAILED)


def _nothing_measured(data, run_id: str, failed: list[str], logs: Path) -> NoReturn:
    """A run that measured nothing: why (every configuration failed, or none applies to the rig), exit code 4."""
    from ..report.analysis import summary

    why = "; ".join(failed[:3]) + (" …" if len(failed) > 3 else "") if failed else \
        "no trial finished without failed requests"
    inapplicable = summary.not_applicable_lines(data)
    if not failed and inapplicable:
        click.echo(f"error: nothing was measured: no configuration applies to this rig "
                   f"({'; '.join(inapplicable[:3])}{' …' if len(inapplicable) > 3 else ''}). Run {run_id} is "
                   "marked failed.", err=True)
    else:
        click.echo(f"error: nothing was measured: every configuration failed ({why}). Run {run_id} is marked "
                   "failed.", err=True)
    click.echo("tip: the reasons are in the report and in each configuration's llama-server.log under "
               f"{logs}.", err=True)
    sys.exit(EXIT_NOTHING_MEASURED)


def _print_table(data) -> None:
    """The terminal view of a stored run: the seed-style table, throughput per concurrency level, and the
    memory, speed and fidelity lines (the same pieces as the Markdown report). Every string goes to rich as a
    Text of `safetext.plain`: labels, reasons and log lines are never read as markup or control sequences."""
    from rich.console import Console
    from rich.table import Table

    from ..core.safetext import rich_text as T
    from ..report.analysis import answer, context, outputs, speed, summary, tables

    console = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)

    def show(title: str, head: list[str], body: list[list[str]], left: int = 2) -> None:
        t = Table(title=T(title))
        for i, h in enumerate(head):
            t.add_column(T(h), justify="left" if i < left else "right")
        for row in body:
            t.add_row(*[T(c) for c in row])
        console.print(t)

    head, body = tables.table_cells(tables.rows(data))
    show(f"{data.run['study']} — run {data.id}", head, body)
    if len({t["concurrency"] for t in data.trials}) > 1 or len(data.cells) > 1:
        f = tables.format_cell
        body = [[r["build"], r["setting"], f(r["prompt_tokens"]), f(r["concurrency"]), f(r["n"]),
                 f(r["aggregate_output_tps"]), f"{f(r['aggregate_output_tps_min'])}–{f(r['aggregate_output_tps_max'])}",
                 f(r["aggregate_input_tps"]), f(r["ttft_ms_p50"]), f(r["itl_ms_p50"])]
                for r in speed.throughput_table(data)]
        show("Throughput by concurrency", ["Build", "Setting", "Prompt tokens", "Parallel requests", "Trials",
                                           "Aggregate output t/s", "min–max", "Aggregate prompt t/s",
                                           "TTFT p50 (ms)", "ITL p50 (ms)"], body)
    for line in summary.not_measured(data):
        console.print(T("not measured: ", "yellow") + T(line))
    for line in summary.not_applicable_lines(data):
        console.print(T("not applicable: ", "yellow") + T(line.replace(": not applicable on this rig — ", ": ", 1)))
    for line in summary.memory_lines(data) + context.sentences(data):
        console.print(T("• " + line))
    key = summary.key_speed_lines(data)
    if len(data.cells) > 1:  # a grid: the verdicts that say something; the map and the table below say the rest
        telling = [x for x in key if not x.endswith(("— no measurable difference", "— untested (one trial)"))]
        if len(telling) < len(key):
            telling.append(f"({len(key) - len(telling)} more: no measurable difference"
                           + (" or untested with one trial" if any(x.endswith("— untested (one trial)") for x in key)
                              else "") + "; every comparison is in the report)")
        key = telling
    for line in key:
        console.print(T("• " + line))
    for line in summary.noise_lines(data):
        console.print(T("• " + line, "yellow"))
    for line in summary.fidelity_lines(data):
        console.print(T("• " + line))
    for line in outputs.lines(data):
        console.print(T("• outputs: " + line))
    _print_advice(console, data, show)
    said = answer.answer(data)
    console.print(T("\nRecommendation.", "bold") + T(" " + said.text))
    if said.command:  # never wrapped by the console: a pasted copy is the command
        console.print(T(said.command, "cyan"), soft_wrap=True)


def _print_advice(console, data, show) -> None:
    """Where pipeline parallelism pays (the workload grid), and the decision table the recommendation comes from.
    `show` puts every cell in a Text: nothing here is read as markup."""
    from ..core.safetext import rich_text as T
    from ..report.analysis import grid, recommend

    p = grid.pair(data)
    gains = grid.gains(data, p) if p else []
    if gains:
        head, body = grid.table(gains)
        show("Pipeline-parallel gain (pipeline / no pipeline)", head, body, left=1)
        console.print(T("• " + grid.crossover(data, gains, p)))
    rows = recommend.decision_table(data)
    if rows:
        head, body = recommend.table_cells(rows)
        show(f"Decision by use ({rows[0].setting})", head, body, left=len(head))


# ---------------------------------------------------------------- commands

@cli.command(context_settings=CONTEXT)
@study_options
def demo(**kw) -> None:
    """Run the pipeline-parallel study on an embedded default: pinned llama.cpp b11312 built for CPU + RPC,
    two local rpc-servers as devices, a synthetic model. Prints the table and the memory verdict. Exit codes as
    for `llamalab run` (3: some configurations failed, 4: nothing measured).

    \b
    Examples:
      llamalab demo
      llamalab demo --json
      llamalab demo --set workload.repeats=5 --set workload.concurrency=[1,4]
    """
    _run_study("demo", **kw)


@cli.command(context_settings=CONTEXT)
@click.argument("study")
@click.option("--model", default=None, metavar="MODEL", help=MODEL_HELP + " A remote one needs --download.")
@click.option("--download", is_flag=True, help=DOWNLOAD_HELP)
@click.option("--budget", default=None, metavar="SIZES",
              help="Free memory per device of the rig to run for, e.g. 16GiB,12GiB (replaces [devices] vram).")
@study_options
def run(study, model, download, budget, **kw) -> None:
    """Run a study: a preset name (pipeline-parallel, split-modes, demo) or a study .toml file.

    Exit code 0 when every configuration was measured, 3 when some failed (the others are in the report), 4 when
    nothing was measured (the run is stored as failed); 1 or 2 for other errors, 130 when interrupted. An arm the
    rig cannot run (too few devices, or a mode llama.cpp refuses here, such as -sm row on CUDA) is "not
    applicable": said once with the reason, and not a failure. Only one run at a time is measured in a database: a
    second `run` while one is running is refused.

    \b
    Examples:
      llamalab run pipeline-parallel --model ~/models/qwen3-8b-q4_k_m.gguf
      llamalab run split-modes --model m.gguf     # layer (4, 1 copies, no pipeline), -sm tensor, row, none
      llamalab run pipeline-parallel --model m.gguf --llama-bin ~/llama-b11312   # a release archive
      llamalab run my-study.toml --set devices.count=2
      llamalab run pipeline-parallel --resume 20261129-101500-ab12cd
      llamalab run pipeline-parallel --model hf://unsloth/Qwen3-8B-GGUF:Q4_K_M --download
    """
    _run_study(study, model=model_arg(model, command="run", weights=True, download=download), budget=budget, **kw)


@cli.command("build", context_settings=CONTEXT)
@click.argument("study")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a study key (repeatable).")
@click.option("--llama-cpp", type=click.Path(path_type=Path), default=None,
              help="Build from this llama.cpp checkout instead of the pinned source (b11312).")
@click.option("--llama-bin", type=click.Path(path_type=Path), default=None, metavar="DIR", help=LLAMA_BIN_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the builds as JSON.")
@click.option("--trust-study", "trust", is_flag=True, help=TRUST_HELP)
def build_cmd(study, overrides, llama_cpp, llama_bin, as_json, trust) -> None:
    """Make every build of a study ahead of time (cached under ~/.cache/llamalab; LLAMALAB_HOME overrides),
    without running anything. A later `llamalab run` reuses them.

    \b
    Examples:
      llamalab build pipeline-parallel
      llamalab build my-study.toml --llama-cpp ~/src/llama.cpp
    """
    from ..setup import prepare as session

    st, _ = load_study(study, [*overrides, *bin_override(llama_bin)], trust)
    progress = new_progress()
    try:
        prep = session.prepare(st, run_options(llama_cpp=llama_cpp), progress)
    finally:
        progress.close()
    items = [{"build": name, **art.as_dict()} for name, art in prep.artifacts.items()]
    items += [{"build": name, "skipped": why} for name, why in prep.skipped.items()]
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for it in items:
        if "skipped" in it:
            click.echo(f"{it['build']:<16} not built: {it['skipped']}")
        elif it["given"]:
            click.echo(f"{it['build']:<16} {it['bin_dir']} — given binaries {it['given']['version']}, nothing built")
        else:
            how = "reused" if it["reused"] else f"built in {it['build_seconds']:.0f} s"
            lib = f" (LD_LIBRARY_PATH={it['lib_dir']})" if it["lib_dir"] else ""
            click.echo(f"{it['build']:<16} {it['bin_dir']}{lib} — {how}")

