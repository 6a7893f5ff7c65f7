"""Command line: argv → library calls. LlamalabError → one clean message and an exit code; no logic here."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click

from . import __version__, proc
from .errors import Interrupted, LlamalabError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


def _sigterm(signum, frame):
    raise KeyboardInterrupt


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="llamalab")
def cli() -> None:
    """llamalab measures, on your own machine, what a llama.cpp build option or runtime flag costs in memory and
    buys in speed, and says what to do about it.

    \b
    Start here:
      llamalab demo                                  the pipeline-parallel study on a synthetic model (CPU only)
      llamalab run pipeline-parallel --model m.gguf  the same study on your model and GPUs
      llamalab inspect server.log                    where did my VRAM go? (any llama.cpp log)
      llamalab report                                the last run as Markdown
    """


# ---------------------------------------------------------------- shared options

def _study_options(f):
    f = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a study key, e.g. --set workload.repeats=5 (repeatable).")(f)
    f = click.option("--llama-cpp", type=click.Path(path_type=Path), default=None,
                     help="Build from this llama.cpp checkout instead of the pinned source (b11312).")(f)
    f = click.option("--db", type=click.Path(path_type=Path), default=None,
                     help="Results database (default ~/.local/share/llamalab/results.db).")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the table rows as JSON on stdout.")(f)
    f = click.option("--resume", metavar="RUN_ID", default=None, help="Complete an unfinished run.")(f)
    f = click.option("--fresh", is_flag=True, help="Start a new run even if this study has an unfinished one.")(f)
    return f


def _run_study(ref: str, overrides, llama_cpp, db, as_json, resume, fresh, model=None) -> None:
    from . import runner, study as studymod
    from .paths import default_db
    from .progress import RichProgress, StderrProgress
    from .report import data as rdata, markdown, tables
    from .report.write import atomic_write
    from .store import Store

    st, text = studymod.load(ref, overrides)
    opts = runner.Options(llama_cpp=llama_cpp, db=db or default_db(), model=model, resume=resume, fresh=fresh)
    progress = RichProgress() if sys.stderr.isatty() else StderrProgress()
    try:
        prep = runner.prepare(st, opts, progress)
        run_id = runner.execute(prep, text, opts, progress)
    finally:
        progress.close()
    with Store(opts.db) as store:
        data = rdata.load(store, run_id)
    md = markdown.render(data)
    atomic_write(opts.runs_dir / run_id / "report.md", md)
    if as_json:
        click.echo(json.dumps(tables.rows(data), indent=2))
        return
    _print_table(data)
    click.echo(f"\nrun {run_id}: report in {opts.runs_dir / run_id / 'report.md'} "
               f"(re-render with `llamalab report {run_id}`)", err=True)


def _print_table(data) -> None:
    from rich.console import Console
    from rich.table import Table

    from .report import tables, verdict

    rows = tables.rows(data)
    head, body = tables.table_cells(rows)
    console = Console(width=200 if not sys.stdout.isatty() else None)
    t = Table(title=f"{data.run['study']} — run {data.id}", show_lines=False)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i < 2 else "right")
    for row in body:
        t.add_row(*row)
    console.print(t)
    for b in data.builds:
        if b["status"] != "ok":
            console.print(f"[yellow]build {b['name']} not measured:[/] {b['reason']}")
    for c in data.configs:
        if c["status"] == "failed":
            console.print(f"[red]{c['build']} × {c['setting']} failed:[/] {(c['reason'] or '').splitlines()[0]}")
    for s in verdict.memory_sentences(data):
        console.print("• " + s)


# ---------------------------------------------------------------- commands

@cli.command(context_settings=CONTEXT)
@_study_options
def demo(overrides, llama_cpp, db, as_json, resume, fresh) -> None:
    """Run the pipeline-parallel study on an embedded default: pinned llama.cpp b11312 built for CPU + RPC,
    two local rpc-servers as devices, a synthetic model. Prints the table and the memory verdict.

    \b
    Examples:
      llamalab demo
      llamalab demo --json
      llamalab demo --set workload.repeats=5 --set workload.concurrency=[1,4]
    """
    _run_study("demo", overrides, llama_cpp, db, as_json, resume, fresh)


@cli.command(context_settings=CONTEXT)
@click.argument("study")
@click.option("--model", type=click.Path(path_type=Path), default=None, help="A GGUF model file to study.")
@_study_options
def run(study, model, overrides, llama_cpp, db, as_json, resume, fresh) -> None:
    """Run a study: a preset name (pipeline-parallel, demo) or a study .toml file.

    \b
    Examples:
      llamalab run pipeline-parallel --model ~/models/qwen3-8b-q4_k_m.gguf
      llamalab run my-study.toml --set devices.count=2
      llamalab run pipeline-parallel --resume 20261129-101500-ab12cd
    """
    _run_study(study, overrides, llama_cpp, db, as_json, resume, fresh, model=model)


@cli.command(context_settings=CONTEXT)
@click.argument("run_id", required=False)
@click.option("--db", type=click.Path(path_type=Path), default=None, help="Results database.")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, help="Write to this file.")
def report(run_id, db, fmt, output) -> None:
    """Render a stored run (default: the latest) from the database.

    \b
    Examples:
      llamalab report
      llamalab report 20261129-101500-ab12cd --format json -o run.json
    """
    from .paths import default_db
    from .report import data as rdata, markdown, tables, verdict
    from .report.write import atomic_write
    from .store import Store

    with Store(db or default_db()) as store:
        data = rdata.load(store, run_id)
    if fmt == "md":
        text = markdown.render(data)
    else:
        text = rdata.dumps({"run": data.run, "rows": tables.rows(data), "memory": verdict.memory_comparisons(data)})
    if output:
        atomic_write(output, text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text)


@cli.command(context_settings=CONTEXT)
@click.option("--db", type=click.Path(path_type=Path), default=None, help="Results database.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def runs(db, as_json) -> None:
    """List stored runs."""
    from .paths import default_db
    from .store import Store

    with Store(db or default_db()) as store:
        items = store.runs()
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for r in items:
        click.echo(f"{r['id']}  {r['study']:<20} {r['status']:<11} {r['trials']:>4} trials  {r['started']}")


@cli.command(context_settings=CONTEXT)
@click.argument("log", type=click.File("r", encoding="utf-8", errors="replace"))
@click.option("--json", "as_json", is_flag=True, help="Print the ledger as JSON.")
def inspect(log, as_json) -> None:
    """Read any llama.cpp / llama-server log (or - for stdin) and show where memory went.

    \b
    Examples:
      llamalab inspect server.log
      llama-server ... -lv 4 2>&1 | tee server.log; llamalab inspect --json server.log
    """
    from . import ledger

    led = ledger.parse(log.read().splitlines())
    click.echo(json.dumps(led.to_json(), indent=2))


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        cli.main(standalone_mode=False, prog_name="llamalab")
    except click.exceptions.Abort:
        proc.terminate_all()
        click.echo("interrupted.", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        stopped = proc.terminate_all()
        click.echo(f"interrupted; stopped {stopped} child process(es). Rerun the same command to resume.", err=True)
        sys.exit(Interrupted.exit_code)
    except LlamalabError as e:
        click.echo(f"error: {e.message}", err=True)
        if e.tip:
            click.echo(f"tip: {e.tip}", err=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
