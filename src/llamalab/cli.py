"""Command line: argv → library calls. LlamalabError → one clean message and an exit code; no logic here."""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import click

from . import __version__, proc
from .errors import ConfigError, Interrupted, LlamalabError
from .report import formats as report_formats  # the format registry alone: its renderers load when used
from .store import runids

if TYPE_CHECKING:
    from .run.options import RunOptions

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}

# Exit codes: 0 done; 1 an error; 2 bad input (study file, flag, model, path); 3 a run finished but some
# configurations failed; 4 a run measured nothing (every configuration failed); 130 interrupted.
EXIT_SOME_FAILED = 3
EXIT_NOTHING_MEASURED = 4


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="llamalab")
def cli() -> None:
    """llamalab measures, on your own machine, what a llama.cpp build option or runtime flag costs in memory and
    buys in speed, and says what to do about it.

    \b
    Start here:
      llamalab demo                                  the pipeline-parallel study on a synthetic model (CPU only)
      llamalab run pipeline-parallel --model m.gguf  the same study on your model and GPUs
      llamalab tune --model m.gguf --budget 16GiB,12GiB   the best llama-server command for your rig
      llamalab inspect server.log                    where did my VRAM go? (any llama.cpp log)
      llamalab run versions                          the same configuration on two llama.cpp versions
      llamalab bisect GOOD BAD --repo ~/llama.cpp    which commit changed the compute buffers?
      llamalab report                                the last run as Markdown

    \b
    Exit codes: 0 done; 1 an error; 2 bad input (study file, flag, model, output path);
    3 the run finished but some configurations failed; 4 nothing was measured (every configuration failed);
    130 interrupted (rerun the same command to resume).
    """


# ---------------------------------------------------------------- shared options

TRUST_HELP = ("Run a study file that asks for what can run code or open this machine to the network (listed when "
              "refused; see docs/study-files.md): a study file from someone else is a script.")


def _load_study(ref: str, overrides, trust: bool):
    """A study, refused when its file asks for what only the user can allow (trust.risks): the file cannot vouch for
    itself, so the word is a flag on the command line. Presets and the user's own --set/--host are trusted."""
    from .study import spec as studymod
    from .study import trust as trustmod

    st, text = studymod.load(ref, overrides)
    found = [] if studymod.is_preset(ref) else trustmod.from_file(trustmod.risks(st), overrides)
    if found and not trust:
        raise ConfigError(
            f"{ref} asks for {len(found)} thing(s) that can run code on this machine or open it to the network:\n"
            + "\n".join(f"  - {r.line()}" for r in found),
            tip="a study file from someone else is a script: read these keys, then run again with --trust-study "
                "to accept them (or override them with --set). docs/study-files.md, \"Study files from others\".")
    for r in found:
        click.echo(f"warning: accepted with --trust-study: {r.line()}", err=True)
    return st, text


LLAMA_BIN_HELP = ("Run every build without CMake options of its own on the llama.cpp binaries in DIR (an extracted "
                  "release archive, a build's build/bin, /usr/bin): nothing is compiled. Builds with CMake options "
                  "are skipped unless --llama-cpp gives a source to build them from. Sets [source] bin.")


def _bin_override(llama_bin: Path | None) -> list[str]:
    """--llama-bin DIR as the study key it sets (an absolute path, so the stored study says which binaries)."""
    if llama_bin is None:
        return []
    p = llama_bin.expanduser()
    return [f"source.bin={json.dumps(str(p if p.is_absolute() else Path.cwd() / p))}"]


MODEL_HELP = ("A GGUF model: a file (or only the first MiB of one), or a remote one read by its header alone: "
              "hf://OWNER/REPO/FILE.gguf (@REVISION), hf://OWNER/REPO:QUANT, https://…/FILE.gguf, ollama://NAME:TAG.")
DOWNLOAD_HELP = ("With a remote --model (hf://, https://, ollama://): fetch its weights (progress bar, resumable; "
                 "hf:// into Hugging Face's own cache, checked against the published sha256).")


def _progress():
    from .run.progress import RichProgress, StderrProgress

    return RichProgress() if sys.stderr.isatty() else StderrProgress()


def _model_path(model: str | None, *, command: str, weights: bool = False, download: bool = False) -> Path | None:
    """--model as a path llama.cpp opens: a local file as it is; a remote reference (llamacpp.modelref) as its
    header-only stand-in, or with `weights` the whole model — fetched only with --download, else refused before
    anything starts."""
    if model is None:
        return None
    from .llamacpp import modelref

    if not modelref.is_reference(model):
        return Path(model).expanduser()
    modelref.parse(model)  # a malformed reference is said before anything else
    if weights and not download:
        from .errors import ModelError

        raise ModelError(f"`llamalab {command}` runs {model} for real, so it needs the model's weights, and without "
                         "--download llamalab fetches only its header.",
                         tip=f"pass --download to fetch the weights (resumable; hf:// into Hugging Face's own cache), "
                             f"or `llamalab plan --model {model}` for the memory answers from the header alone.")
    from .llamacpp import modelsource
    from .paths import cache_home

    progress = _progress()
    try:
        res = modelsource.resolve(model, cache_home(), weights=weights, log=progress.message,
                                  on_download=progress.download)
    finally:
        progress.close()
    click.echo(res.note, err=True)
    return res.path


def _study_options(f):
    f = click.option("--trust-study", "trust", is_flag=True, help=TRUST_HELP)(f)
    f = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a study key, e.g. --set workload.repeats=5 (repeatable).")(f)
    f = click.option("--llama-cpp", type=click.Path(path_type=Path), default=None,
                     help="Build from this llama.cpp checkout instead of the pinned source (b11312).")(f)
    f = click.option("--llama-bin", type=click.Path(path_type=Path), default=None, metavar="DIR",
                     help=LLAMA_BIN_HELP)(f)
    f = click.option("--db", type=click.Path(path_type=Path), default=None,
                     help="Results database (default ~/.local/share/llamalab/results.db).")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the table rows as JSON on stdout.")(f)
    f = click.option("--resume", metavar="RUN_ID", default=None, help="Complete an unfinished run.")(f)
    f = click.option("--fresh", is_flag=True, help="Start a new run even if this study has an unfinished one.")(f)
    f = click.option("--crosscheck", is_flag=True,
                     help="Afterwards, run llama-bench on the first configuration and compare its speeds, and the "
                     "client's wall time with the server's own timings.")(f)
    f = click.option("--max-context", type=click.Choice(["off", "verify", "search"]), default="off", show_default=True,
                     help="Afterwards, load every fitted context again with fit off (verify), or also bisect -c up "
                     "to the model's training context for the largest that loads, within [devices] vram budgets "
                     "if any (search; at most 6 loads per configuration).")(f)
    f = click.option("--budget-context", type=click.Choice(["auto", "always", "off"]), default="auto",
                     show_default=True,
                     help="With [devices] vram budgets: afterwards, find each configuration's largest context within "
                     "every device's budget (and within them less llama.cpp's margin) by dry runs at fixed -c "
                     "(auto: where llama.cpp's fit left a device over its budget, then for every "
                     "configuration; always: for every configuration). --max-context verify loads each for "
                     "real.")(f)
    f = click.option("--host", default=None, metavar="ADDR",
                     help="Bind llama-server and rpc-servers to ADDR instead of 127.0.0.1 (rpc-server has no "
                     "authentication: only on networks you trust).")(f)
    return f


def _options(*, budget: str | None = None, db: Path | None = None, **given: Any) -> RunOptions:
    """The one options object of run, plan, tune and bisect (and build, quality, the repository table) from the
    command line: --budget parsed once into MiB, the default database where --db is not given, the rest as given."""
    from .paths import default_db
    from .run.options import RunOptions, parse_budget_option

    return RunOptions(budgets_mib=parse_budget_option(budget), db=db or default_db(), **given)


def _open_store(opts: RunOptions, resume: str | None = None) -> None:
    """Before anything is built or run: the database opens, is sound, no other run is being measured in it, and a
    run to resume is one this machine made."""
    from .store.db import Store

    if resume:
        runids.check_ref(resume, "--resume")
    with Store(opts.db) as store:
        store.check()
        store.refuse_if_busy()
        if resume:
            store.resumable(resume)


def _run_study(ref: str, *, overrides, llama_cpp, llama_bin, db, as_json, resume, fresh, crosscheck, max_context,
               budget_context, host, trust, model=None, budget=None) -> None:
    from .store.db import Store

    overrides = list(overrides) + _bin_override(llama_bin)
    if host:
        overrides += _host_overrides(host)
    st, text = _load_study(ref, overrides, trust)
    # imported only now: a mistake in the command line or the study is reported without loading the run loop, and
    # the report modules (scipy) load after the run
    from .run import runner, session
    from .run.progress import RichProgress, StderrProgress
    opts = _options(llama_cpp=llama_cpp, db=db, model=model, budget=budget, resume=resume, fresh=fresh,
                    crosscheck=crosscheck, max_context=max_context, budget_context=budget_context)
    _open_store(opts, resume)
    progress = RichProgress() if sys.stderr.isatty() else StderrProgress()
    try:
        prep = session.prepare(st, opts, progress)
        run_id = runner.execute(prep, text, opts, progress)
    finally:
        progress.close()
    from .report import data as rdata
    from .report import markdown, tables
    from .write import atomic_write

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
    from .report import summary

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

    from .report import answer, context, speed, summary, tables
    from .safetext import rich_text as T

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
    _print_advice(console, data, show)
    said = answer.answer(data)
    console.print(T("\nRecommendation.", "bold") + T(" " + said.text))
    if said.command:
        console.print(T(said.command, "cyan"))


def _host_overrides(host: str) -> list[str]:
    """`--host ADDR`: llama-server listens on ADDR; local rpc-servers too where ADDR is IPv4 (rpc-server binds IPv4
    only), else on 127.0.0.1 for a loopback name (::1, localhost). Any other IPv6 address or name is refused."""
    from . import net
    from .study import endpoints, trust

    out = [f"server.host={json.dumps(host)}"]
    if endpoints.is_ipv4(host):
        out.append(f"devices.host={json.dumps(host)}")
    elif not trust.is_loopback(host):
        raise ConfigError(f"--host {host}: local rpc-servers listen on an IPv4 address only, and {host} is not one.",
                          tip="give an IPv4 address, or set the two apart: --set server.host=… --set devices.host=….")
    if not trust.is_loopback(host):
        click.echo(f"warning: servers will listen on {host}; rpc-server has no authentication, so anyone who can "
                   "reach that address can use this machine's devices.", err=True)
    elif net.is_ipv6(host) or host == "localhost":
        click.echo(f"note: llama-server listens on {host}; local rpc-servers on 127.0.0.1 (rpc-server binds IPv4 "
                   "only).", err=True)
    return out


def _print_advice(console, data, show) -> None:
    """Where pipeline parallelism pays (the workload grid), and the decision table the recommendation comes from.
    `show` puts every cell in a Text: nothing here is read as markup."""
    from .report import grid, recommend
    from .safetext import rich_text as T

    p = grid.pair(data)
    gains = grid.gains(data, p) if p else []
    if gains:
        head, body = grid.table(gains)
        show("Pipeline-parallel gain (pipeline / no pipeline)", head, body, left=1)
        console.print(T("• " + grid.crossover(data, gains, p)))
    rows = recommend.decision_table(data)
    if rows:
        head, body = recommend.table_cells(rows)
        show(f"Decision by use ({rows[0].setting})", head, body, left=5)


# ---------------------------------------------------------------- commands

@cli.command(context_settings=CONTEXT)
@_study_options
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
@_study_options
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
    _run_study(study, model=_model_path(model, command="run", weights=True, download=download), budget=budget, **kw)


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
    from .run import session
    from .run.progress import RichProgress, StderrProgress

    st, _ = _load_study(study, [*overrides, *_bin_override(llama_bin)], trust)
    progress = RichProgress() if sys.stderr.isatty() else StderrProgress()
    try:
        prep = session.prepare(st, _options(llama_cpp=llama_cpp), progress)
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


@cli.command(context_settings=CONTEXT)
@click.argument("run_id", required=False)
@click.option("--db", type=click.Path(path_type=Path), default=None, help="Results database.")
@click.option("--format", "fmt", type=click.Choice(list(report_formats.FORMATS)), default="md", show_default=True,
              help=report_formats.help_text())
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, help="Write to this file.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the plots (PNG and SVG) into this folder.")
def report(run_id, db, fmt, output, plots_dir) -> None:
    """Render a stored run (default: the latest) from the database, never from a live run.

    \b
    Examples:
      llamalab report
      llamalab report 20261129-101500-ab12cd --format json -o run.json
      llamalab report --format csv -o run.csv        # run.csv and run.configs.csv
      llamalab report --format html -o run.html --plots plots/
    """
    from .paths import default_db
    from .report import data as rdata
    from .store.db import Store

    db = db or default_db()
    # the trials keep only their requests' speed figures; CSV and JSON read every request again as they write it,
    # so the database stays open until the report is written
    with Store(db, readonly=True) as store:
        data = rdata.load(store, run_id, requests=False)
        from .write import Target, db_files, write_all

        formats = report_formats  # its renderers (scipy, matplotlib) load once there is a run to render
        targets = []
        if output:
            targets += [Target(path, text, "-o" if path == output else
                               f"beside -o ({formats.beside(fmt, output, path)})")
                        for path, text in formats.files(data, fmt, output).items()]
        else:
            for piece in formats.pieces(data, fmt):
                click.echo(piece, nl=False)
            for c in formats.get(fmt).companions:
                click.echo(c.without_output, err=True)
        if plots_dir:
            targets += [Target(path, blob, "--plots") for path, blob in formats.plot_files(data, plots_dir).items()]
        # all or nothing, and never onto the database this command reads
        for path in write_all(targets, reads=db_files(db)):
            click.echo(f"wrote {path}", err=True)


@cli.command(context_settings=CONTEXT)
@click.option("--db", type=click.Path(path_type=Path), default=None, help="Results database.")
@click.option("--json", "as_json", is_flag=True,
              help="Print as JSON: id, study, status (finished | interrupted | failed | running), started, finished, "
                   "host, trials, live (a llamalab process is measuring it now), imported.")
def runs(db, as_json) -> None:
    """List stored runs, oldest first. A run is "running" only while the llamalab that measures it lives; one
    whose process was killed shows as "interrupted" (rerun its command to resume it). Imported runs are marked.

    \b
    Examples:
      llamalab runs
      llamalab runs --json
    """
    from .paths import default_db
    from .store.db import Store

    with Store(db or default_db(), readonly=True) as store:
        items = store.runs()
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    if not items:
        click.echo("no runs stored yet; `llamalab demo` makes one.", err=True)
    from .safetext import one_line

    for r in items:  # imported runs carry other machines' names
        click.echo(one_line(f"{r['id']}  {r['study']:<20} {r['status']:<11} {r['trials']:>4} trials  {r['started']}  "
                            f"{r['host']}{'  (imported)' if r['imported'] else ''}"))


@cli.command(context_settings=CONTEXT)
@click.argument("run_a")
@click.argument("run_b")
@click.option("--db", type=click.Path(path_type=Path), default=None, help="Results database holding both runs.")
@click.option("--threshold", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="Smallest speed change that counts (default: run A's study threshold, else 0.02).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def compare(run_a, run_b, db, threshold, as_json) -> None:
    """Compare two stored runs (A is the baseline): every build × setting both measured, in compute MiB per device,
    context and speed (B/A ratios with 95% bootstrap intervals and a verdict). The runs may come from different
    machines (`llamalab import`).

    \b
    Examples:
      llamalab compare 20261129-101500-ab12cd 20261130-090000-ef34ab
      llamalab compare RUN_A RUN_B --json
    """
    from .paths import default_db
    from .report import data as rdata
    from .store.db import Store

    with Store(db or default_db(), readonly=True) as store:
        a, b = rdata.load(store, run_a, requests=False), rdata.load(store, run_b, requests=False)
    from .report import compare as cmp  # its statistics (scipy) load once both runs are found
    from .safetext import plain

    result = cmp.compare(a, b, threshold)
    click.echo(rdata.dumps(result) if as_json else plain(cmp.markdown(result)), nl=as_json)


@cli.command("export", context_settings=CONTEXT)
@click.argument("run_id", required=False)
@click.option("--db", type=click.Path(path_type=Path), default=None, help="Results database.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Write to this file (default: stdout).")
def export_cmd(run_id, db, output) -> None:
    """Write one stored run (default: the latest) as a versioned JSON document with everything stored, for
    `llamalab import` on another machine.

    \b
    Examples:
      llamalab export 20261129-101500-ab12cd -o rig1.json
    """
    from .paths import default_db
    from .store import exchange
    from .store.db import Store
    from .write import atomic_write, db_files

    db = db or default_db()
    with Store(db, readonly=True) as store:  # the run is checked whole before the first piece is written
        pieces = exchange.export_chunks(store, run_id)
        first = next(pieces)
        if output:
            atomic_write(output, _chain(first, pieces), reads=db_files(db))
            click.echo(f"wrote {output}", err=True)
        else:
            for piece in _chain(first, pieces):
                click.echo(piece, nl=False)


def _chain(first: str, rest):
    yield first
    yield from rest


class _Source:
    """A file read as text in pieces, more than once, from one open file: the second reading must see the bytes the
    first saw (their sha256), or it fails before its last piece, inside the import's transaction."""

    PIECE = 1 << 20

    def __init__(self, path: Path):
        import hashlib
        import shutil
        import tempfile

        self.path = path
        self.f: IO[bytes] = open(path, "rb")
        if not self.f.seekable():  # a pipe (`… | llamalab import /dev/stdin`): kept in a temporary file to read twice
            spool = tempfile.TemporaryFile()
            shutil.copyfileobj(self.f, spool, self.PIECE)
            self.f.close()
            self.f = spool
        self.digest: bytes | None = None
        self._sha = hashlib.sha256

    def close(self) -> None:
        self.f.close()

    def pieces(self, check: bool = False):
        import codecs

        self.f.seek(0)
        sha = self._sha()
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        while block := self.f.read(self.PIECE):
            sha.update(block)
            yield dec.decode(block)
        if check and sha.digest() != self.digest:
            raise ConfigError(f"{self.path} changed while it was being imported; nothing was imported.",
                              tip="import it again once nothing writes to it.")
        self.digest = sha.digest()
        yield dec.decode(b"", final=True)


@cli.command("import", context_settings=CONTEXT)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--db", type=click.Path(path_type=Path), default=None, help="Results database to import into.")
def import_cmd(file, db) -> None:
    """Load a run written by `llamalab export` into this database, under its own id. Importing the same run again
    changes nothing; a different run with the same id is refused.

    \b
    Examples:
      llamalab import rig1.json
      llamalab compare RIG1_RUN LOCAL_RUN
    """
    from .paths import default_db
    from .store import exchange
    from .store.db import Store

    source = _Source(file)
    try:  # read twice as a stream: checked whole before the database is opened, then put in one transaction
        checked = exchange.check(exchange.scan(source.pieces()), name=str(file))
        with Store(db or default_db()) as store:
            result = exchange.import_file(store, lambda: exchange.scan(source.pieces(check=True)), checked)
    finally:
        source.close()
    from .safetext import plain

    click.echo(plain(result.message))  # it names the imported run: someone else's text


@cli.command(context_settings=CONTEXT)
@click.argument("log", type=click.File("r", encoding="utf-8", errors="replace"))
@click.option("--json", "as_json", is_flag=True, help="Print the ledger as JSON.")
@click.option("--tensor-split", "tensor_split", metavar="LIST", default=None,
              help="The -ts the server ran with (e.g. 3,1): under -sm tensor it divides the Meta() device's weights "
                   "and KV cache between its devices (the log does not print it; without it, equal shares).")
def inspect(log, as_json, tensor_split) -> None:
    """Read any llama.cpp / llama-server log (or - for stdin) and show where memory went: MiB per device
    (model / KV / compute / output) and per host buffer type, pipeline parallelism and its copies (and whether
    llama.cpp dropped it), context, graph splits, and, when pipeline parallelism is on, the estimated saving with
    one scheduler copy in MiB and tokens of context. Reads ollama's server logs too (journald lines and its
    `msg="…"` records). Under -sm tensor the Meta() buffers are attributed to the devices they span.

    \b
    Examples:
      llamalab inspect server.log
      llama-server ... -lv 4 2>&1 | tee server.log; llamalab inspect --json server.log
      pbpaste | llamalab inspect -
      journalctl -u ollama --no-pager | llamalab inspect -
      llamalab inspect --tensor-split 3,1 tensor-split.log
    """
    from .llamacpp import argv, ledger
    from .report import inspect_view

    split = None
    if tensor_split is not None:
        split = argv.tensor_split(["-ts", tensor_split])
        if not split:
            raise ConfigError(f"--tensor-split {tensor_split!r} is not a list of numbers.",
                              tip="give the proportions as llama-server takes them, e.g. --tensor-split 3,1")
        if min(split) < 0 or not sum(split) > 0:
            raise ConfigError(f"--tensor-split {tensor_split!r}: the proportions are numbers ≥ 0, at least one above "
                              "0.", tip="give the proportions as llama-server takes them, e.g. --tensor-split 3,1")
    led = ledger.parse(ledger.lines_of(iter(lambda: log.read(1 << 20), "")), tensor_split=split)  # streamed
    if as_json:
        click.echo(json.dumps(inspect_view.inspect_json(led), indent=2))
    else:
        click.echo(inspect_view.render(led), nl=False)


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(as_json) -> None:
    """Show what this machine has for building and running llama.cpp (Python, CMake, compilers, Ninja, ccache,
    CUDA toolkit and driver, Vulkan SDK, ROCm, Metal, OpenBLAS, GPUs with memory), which backends llamalab can
    build and run here, and the exact command that installs anything missing (this OS's command first).

    \b
    Examples:
      llamalab doctor
      llamalab doctor --json
    """
    from .machine import doctor as doctormod

    rep = doctormod.examine()
    click.echo(json.dumps(rep.to_json(), indent=2) if as_json else doctormod.render(rep), nl=as_json)


@cli.command(context_settings=CONTEXT)
@click.argument("study", required=False)
@click.option("--model", default=None, metavar="MODEL",
              help=MODEL_HELP + " hf://OWNER/REPO alone plans every quant of the repository in one table.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a study key, e.g. --set devices.count=3 (repeatable).")
@click.option("--budget", default=None, metavar="SIZES",
              help="Free memory per device of the rig to plan for, e.g. 16GiB,12GiB (replaces [devices] vram).")
@click.option("--context", "context", type=click.IntRange(1), default=None, metavar="N",
              help="With hf://OWNER/REPO: also the smallest budget each quant needs for a context of N tokens.")
@click.option("--markdown", is_flag=True, help="With hf://OWNER/REPO: print the table as Markdown.")
@click.option("--download", is_flag=True, help="With a remote --model: fetch the whole model rather than its header "
              "(for a server that does not answer Range requests).")
@click.option("--target", type=click.Choice(["cuda", "vulkan", "rocm", "metal", "cpu-rpc"]), default=None,
              help="The backend the figures are for (default: the one the dry runs use); labels CPU-RPC figures "
                   "as approximations of it.")
@click.option("--llama-cpp", type=click.Path(path_type=Path), default=None,
              help="Build from this llama.cpp checkout instead of the pinned source (b11312).")
@click.option("--llama-bin", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="Dry-run with the llama-server in DIR (given binaries, nothing compiled); builds with CMake "
                   "options are not planned unless --llama-cpp gives a source. Sets [source] bin.")
@click.option("--logs", "logs_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the dry runs' llama-server logs in this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--trust-study", "trust", is_flag=True, help=TRUST_HELP)
def plan(study, model, overrides, budget, context, markdown, download, target, llama_cpp, llama_bin, logs_dir, as_json,
         trust) -> None:
    """Memory per device, fitted context and pipeline-parallel copies for every build × setting of a study, from
    llama.cpp's no-alloc dry run: no weights are loaded, so it takes seconds, and a model's header is enough — a
    remote model's header is fetched with Range requests (a few MiB), never its weights. STUDY defaults to
    pipeline-parallel.

    With --model hf://OWNER/REPO, every GGUF model of the repository (split files as one) is dry-run with the
    study's first build under the budgets, and one table says per quant: file size, whether it fits, the fitted
    context with llama.cpp's default and with pipeline parallelism off (-ot no_such_tensor=CPU), and with
    --context N the smallest budget it needs for N tokens.

    \b
    Examples:
      llamalab plan demo
      llamalab plan --model ~/models/qwen3-8b-q4_k_m.gguf --budget 16GiB,12GiB
      llamalab plan --model hf://unsloth/Qwen3-8B-GGUF --budget 16GiB,12GiB --context 32768
      llamalab plan --model hf://unsloth/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf --budget 16GiB,12GiB
      llamalab plan --model ollama://qwen3:8b --budget 16GiB,12GiB
      head -c 64M llama-70b.gguf > head.gguf; llamalab plan --model head.gguf --budget 24GiB,24GiB
      llamalab plan pipeline-parallel --model m.gguf --target cuda --json
    """
    from rich.console import Console

    from .llamacpp import modelref
    from .run import plan as planmod

    if model and modelref.is_reference(model):
        ref = modelref.parse(model)
        if isinstance(ref, modelref.HfRepo) and ref.quant is None:
            if download:
                raise ConfigError("--download with a whole repository would fetch every quant.",
                                  tip="pick one: --model hf://OWNER/REPO:Q4_K_M --download.")
            return _plan_repo(model, study, overrides, budget, context, markdown, llama_cpp, llama_bin, logs_dir,
                              as_json, trust)
    if context is not None or markdown:
        raise ConfigError("--context and --markdown belong to the repository table (--model hf://OWNER/REPO).",
                          tip="for one model, -c N in the study's arguments plans that context: "
                              "--set 'server.args=[\"-c\",\"32768\"]'.")
    st, _ = _load_study(study or "pipeline-parallel", [*overrides, *_bin_override(llama_bin)], trust)
    opts = _options(llama_cpp=llama_cpp, model=_model_path(model, command="plan", weights=download, download=download),
                    budget=budget, target=target, logs_dir=logs_dir)
    progress = _progress()
    try:
        result = planmod.plan_study(st, opts, progress)
    finally:
        progress.close()
    if as_json:
        click.echo(planmod.dumps(result))
        return
    from .report import plan_view

    Console(width=200 if not sys.stdout.isatty() else None).print(plan_view.render(result))


def _plan_repo(model, study, overrides, budget, context, markdown, llama_cpp, llama_bin, logs_dir, as_json,
               trust) -> None:
    """`plan --model hf://OWNER/REPO`: every quant's stand-in, dry-run, in one table (run.planrepo)."""
    from .llamacpp import modelsource
    from .paths import cache_home
    from .report import planrepo_view
    from .run import planrepo

    st, _ = _load_study(study or "pipeline-parallel", [*overrides, *_bin_override(llama_bin)], trust)
    progress = _progress()
    try:
        found = modelsource.resolve_repo(model, cache_home(), log=progress.message)
        opts = _options(llama_cpp=llama_cpp, budget=budget, context=context, logs_dir=logs_dir)
        result = planrepo.plan_repo(st, opts, found, progress)
    finally:
        progress.close()
    if as_json:
        click.echo(planrepo.dumps(result))
    elif markdown:
        click.echo(planrepo_view.markdown(result), nl=False)
    else:
        planrepo_view.print_table(result)


@cli.command(context_settings=CONTEXT)
@click.argument("good")
@click.argument("bad")
@click.option("--metric", type=click.Choice(["compute_mib", "kv_mib", "model_mib", "used_mib", "n_ctx", "copies",
                                              "graph_splits"]), default="compute_mib", show_default=True,
              help="The dry-run figure to follow: compute, KV or weight MiB summed over the devices and the host, "
                   "their total, the fitted context, the scheduler's copies or the graph's splits.")
@click.option("--config", "config", default="demo", show_default=True, metavar="STUDY",
              help="The study (preset or file) whose configuration each commit is dry-run with.")
@click.option("--build", "build_name", default=None, metavar="NAME",
              help="The study's build whose CMake options and arguments apply (default: its first).")
@click.option("--setting", "setting_name", default=None, metavar="NAME",
              help="The study's setting (default: its first).")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="The llama.cpp git checkout (default: the study's [source] llama_cpp, else the current folder). "
                   "It is only read: llamalab checks commits out in its own shared clone.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a study key, e.g. --set devices.count=3 (repeatable).")
@click.option("--model", default=None, metavar="MODEL", help=MODEL_HELP)
@click.option("--download", is_flag=True, help="With a remote --model: fetch the whole model rather than its header.")
@click.option("--budget", default=None, metavar="SIZES",
              help="Free memory per device, e.g. 16GiB,12GiB (replaces [devices] vram).")
@click.option("--logs", "logs_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the dry runs' logs in this folder (default: under the bisect's folder in $LLAMALAB_HOME).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("--trust-study", "trust", is_flag=True, help=TRUST_HELP)
def bisect(good, bad, metric, config, build_name, setting_name, repo, overrides, model, download, budget, logs_dir,
           as_json, trust) -> None:
    """Find the first commit between GOOD and BAD of a llama.cpp checkout that changes a memory figure, from dry
    runs (llama.cpp's no-alloc memory fit: no weights loaded) of one configuration of a study. Every commit is
    built in one shared build folder (only the programs the dry run starts; ninja recompiles what the commit
    changed); prints each measured commit, the first that changes the figure with its diff link, and the time
    the bisect took.

    \b
    Examples:
      llamalab bisect b11312 b11434 --repo ~/src/llama.cpp
      llamalab bisect v1 HEAD --metric kv_mib --config pipeline-parallel --model m.gguf --budget 16GiB,16GiB
    """
    from .run import bisect as bisectmod
    from .run.options import BisectTarget
    from .run.progress import RichProgress, StderrProgress

    st, _ = _load_study(config, overrides, trust)
    where = repo or (Path(st.source.llama_cpp) if st.source.llama_cpp else Path.cwd())
    opts = _options(model=_model_path(model, command="bisect", weights=download, download=download), budget=budget,
                    logs_dir=logs_dir, bisect=BisectTarget(repo=where, good=good, bad=bad, metric=metric,
                                                           build=build_name, setting=setting_name))
    progress = RichProgress() if sys.stderr.isatty() else StderrProgress()
    try:
        out = bisectmod.bisect(st, opts, progress)
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(out.to_json(), indent=2))
    else:
        click.echo(bisectmod.render(out, where.expanduser().resolve()), nl=False)


@cli.command(context_settings=CONTEXT)
@click.argument("study", required=False)
@click.option("--model", default=None, metavar="M",
              help="A GGUF model file, the name of a synthetic model (tiny, 8b, qwen3moe-tiny, 30b-a3b, …), or a "
                   "remote model (hf://OWNER/REPO/FILE.gguf, hf://OWNER/REPO:QUANT, https://…, ollama://NAME:TAG): "
                   "stage one from its header alone; stage two needs --download.")
@click.option("--download", is_flag=True, help=DOWNLOAD_HELP + " Tune's stage two runs them for real.")
@click.option("--budget", default=None, metavar="SIZES",
              help="Free memory per device of the rig to tune for, e.g. 16GiB,12GiB (replaces [devices] vram; "
                   "default: what each device reports free).")
@click.option("--goal", type=click.Choice(["context", "throughput"]), default=None,
              help="context: the most context whose generation is not measurably slower than llama.cpp's default "
                   "(or --min-gen-tps); throughput: the most aggregate output t/s at --parallel requests. "
                   "Default: [tune] goal, else context.")
@click.option("--min-context", type=click.IntRange(0), default=None, metavar="N",
              help="Tokens of context the pick must hold at least.")
@click.option("--min-gen-tps", type=click.FloatRange(0), default=None, metavar="X",
              help="Single-stream generation t/s the pick must reach (replaces the default's speed as the floor).")
@click.option("--parallel", type=click.IntRange(1, 64), default=None, metavar="K",
              help="Requests served at once: -np K, and the aggregate speed is measured at K requests.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a study key, e.g. --set tune.kv='[\"f16/f16\",\"q8_0/q8_0\"]' (repeatable).")
@click.option("--llama-cpp", type=click.Path(path_type=Path), default=None,
              help="Build from this llama.cpp checkout instead of the pinned source (b11312).")
@click.option("--llama-bin", type=click.Path(path_type=Path), default=None, metavar="DIR", help=LLAMA_BIN_HELP)
@click.option("--db", type=click.Path(path_type=Path), default=None,
              help="Results database (default ~/.local/share/llamalab/results.db).")
@click.option("--logs", "logs_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the dry runs' llama-server logs in this folder.")
@click.option("--exhaustive", is_flag=True, default=None,
              help="Stage two without racing: every front member with all its trials (the oracle the race is "
                   "checked against; sets [tune] exhaustive).")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Stage two's time budget: no member gets trials beyond its screening one once S seconds are "
                   "spent; the report says what was left undecided (sets [tune] seconds).")
@click.option("--max-kld", type=click.FloatRange(0), default=None, metavar="X",
              help="Rule out KV cache pairs whose mean KL divergence against f16/f16 (llama-perplexity, measured "
                   "in stage one on a real model) is above X (sets [tune] max_kld).")
@click.option("--emit", type=click.Choice(["command", "llama-swap"]), default="command", show_default=True,
              help="What to print after the table: the llama-server command, or the pick as a llama-swap "
                   "config.yaml entry (models: NAME: cmd: …, with ${PORT}).")
@click.option("--fresh", is_flag=True, help="Start a new run even if this tune has an unfinished one, and dry-run "
              "stage one again rather than reuse an earlier tune's (same search, model, build and budgets).")
@click.option("--json", "as_json", is_flag=True, help="Print the search, the front and the pick as JSON.")
@click.option("--trust-study", "trust", is_flag=True, help=TRUST_HELP)
def tune(study, model, download, budget, goal, min_context, min_gen_tps, parallel, overrides, llama_cpp, llama_bin, db,
         logs_dir, exhaustive, seconds, max_kld, emit, fresh, as_json, trust) -> None:
    """Find the llama-server command for this rig and this model. Stage one dry-runs the search space — split mode
    (layer with and without pipeline parallelism, tensor, none), -ts layer splits, K and V cache types, -ub, and
    --n-cpu-moe for MoE models, each only where it applies — and keeps the feasible, non-dominated candidates
    (seconds, no weight loaded). Stage two runs that front and llama.cpp's default (--fit, no flags) for real
    with the study's workload, and prints the front, the pick for the goal and its exact command. The run is
    stored: `llamalab report` renders it with a plot of the front. STUDY defaults to the `tune` preset; its
    [tune] section holds these options (docs/tune.md). Exit codes as for `llamalab run`.

    \b
    Examples:
      llamalab tune tune-demo                              # CPU only: two rpc-servers, 300 MiB budgets
      llamalab tune --model ~/models/qwen3-8b-q4_k_m.gguf --budget 16GiB,12GiB
      llamalab tune --model qwen3-30b-a3b-q8_0.gguf --budget 24GiB --goal throughput --parallel 4
      llamalab tune --model hf://unsloth/Qwen3-8B-GGUF:Q4_K_M --budget 16GiB,12GiB   # stage one, from the header
    """
    from .run import tune as tunemod
    from .run.progress import RichProgress, StderrProgress

    sets, model_path, remote = _tune_model([*overrides, *_bin_override(llama_bin)], model)
    for key, value in (("goal", goal), ("min_context", min_context), ("min_gen_tps", min_gen_tps),
                       ("parallel", parallel), ("exhaustive", exhaustive), ("seconds", seconds),
                       ("max_kld", max_kld)):
        if value is not None:
            sets.append(f"tune.{key}={json.dumps(value)}")
    st, _ = _load_study(study or "tune", sets, trust)
    if remote:
        model_path = _model_path(model, command="tune", weights=download, download=download)
    opts = _options(llama_cpp=llama_cpp, model=model_path, budget=budget, db=db, logs_dir=logs_dir, fresh=fresh,
                    stage_one_only=remote and not download)
    _open_store(opts)
    progress = RichProgress() if sys.stderr.isatty() else StderrProgress()
    try:
        result = tunemod.run_tune(st, opts, progress)
    finally:
        progress.close()
    if result.run_id is None:  # a header-only stand-in: stage one only
        from .report import data as rdata
        from .report import tune_stage_one

        if as_json:
            click.echo(rdata.dumps(result.doc))
        else:
            _print_stage_one(result.doc)
        click.echo(f"\nstage two runs the front for real and needs the model's weights: "
                   f"{tune_stage_one.why(result.doc)} Rerun with --download to fetch them (resumable) and measure the "
                   "front.", err=True)
        return
    _tune_outcome(opts, result.run_id, emit, as_json)


def _tune_model(sets: list[str], model: str | None) -> tuple[list[str], Path | None, bool]:
    """`tune --model`: the study overrides with a synthetic model's name as model.preset, the local model file,
    and whether it is a remote reference (resolved after the study loads)."""
    from .llamacpp import modelref

    model_path = None
    remote = model is not None and modelref.is_reference(model)
    if model is not None and remote:
        modelref.parse(model)
    elif model is not None:
        from .llamacpp import models

        if Path(model).expanduser().exists() or model not in models.PRESETS:
            model_path = Path(model).expanduser()
        else:
            sets.append(f"model.preset={json.dumps(model)}")
    return sets, model_path, remote


def _tune_outcome(opts: RunOptions, run_id: str, emit: str, as_json: bool) -> None:
    """A tune's stored run: its report written, the front and the pick printed (or the llama-swap entry), and the
    exit code as for `llamalab run`."""
    from .report import data as rdata
    from .report import markdown
    from .report import tune as rtune
    from .run import runner
    from .store.db import Store
    from .write import atomic_write

    with Store(opts.db) as store:
        data = rdata.load(store, run_id, requests=False)
        failed, total, measured = runner.run_outcome(store, run_id)
    atomic_write(opts.runs_dir / run_id / "report.md", markdown.render(data))
    view = rtune.view(data)
    if as_json:
        click.echo(rdata.dumps(rtune.as_json(view)))
    elif emit == "llama-swap" and view is not None:
        _print_tune(view, command=False)
        click.echo(rtune.llama_swap(view))
        click.echo(f"\nrun {run_id}: the entry above goes under `models:` in llama-swap's config.yaml", err=True)
    else:
        _print_tune(view)
        click.echo(f"\nrun {run_id}: report in {opts.runs_dir / run_id / 'report.md'} "
                   f"(`llamalab report {run_id} --format html -o tune.html` draws the front)", err=True)
    if not measured:
        click.echo(f"error: nothing was measured: every configuration failed ({'; '.join(failed[:3])}).", err=True)
        sys.exit(EXIT_NOTHING_MEASURED)
    if failed:
        click.echo(f"warning: {len(failed)} of {total} configuration(s) failed: {'; '.join(failed[:3])}"
                   f"{' …' if len(failed) > 3 else ''} (exit code {EXIT_SOME_FAILED}).", err=True)
        sys.exit(EXIT_SOME_FAILED)


def _table(title: str, head: list[str], body: list[list[str]], left: int = 2):
    """A rich table of a tune's front: every cell a Text of `safetext.plain`, the first `left` columns left."""
    from rich.table import Table

    from .safetext import rich_text as T

    t = Table(title=T(title))
    for i, h in enumerate(head):
        t.add_column(T(h), justify="left" if i < left else "right")
    for row in body:
        t.add_row(*[T(c) for c in row])
    return t


def _print_stage_one(doc: dict) -> None:
    """Tune's stage one alone (the model is a header-only stand-in): the verified front and llama.cpp's default."""
    from rich.console import Console

    from .report import tune_stage_one
    from .safetext import rich_text as T

    console = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)
    console.print(_table("tune — stage one (dry runs): the predicted front, verified",
                         *tune_stage_one.front_table(doc)))
    for line in tune_stage_one.lines(doc):
        console.print(T("• " + line))


def _print_tune(view, command: bool = True) -> None:
    """The tune's front, pick and command on the terminal (every string a Text of `safetext.plain`)."""
    from rich.console import Console

    from .report import tune as rtune
    from .safetext import rich_text as T

    console = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)
    if view is None:
        console.print(T("this run holds no tune"))
        return
    console.print(_table(f"tune — run {view.run_id}: the front, measured", *rtune.front_table(view)))
    for line in rtune.lines(view):
        console.print(T("• " + line))
    console.print(T("\nPick.", "bold") + T(" " + " ".join(filter(None, (view.pick_sentence, view.versus_default)))))
    if command:
        console.print(T(view.command))


@cli.command(context_settings=CONTEXT)
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--kv", default="f16/q8_0,q8_0/q8_0,q4_0/q4_0", show_default=True, metavar="PAIRS",
              help="K/V cache type pairs to compare with f16/f16, comma-separated.")
@click.option("--llama-cpp", type=click.Path(path_type=Path), default=None,
              help="Build from this llama.cpp checkout instead of the pinned source (b11312).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def quality(model, kv, llama_cpp, as_json) -> None:
    """What a quantized KV cache costs in output quality on MODEL: llama.cpp's `llama-perplexity --kl-divergence`
    of each K/V pair against an f16/f16 cache over the same text (llama.cpp's own docs, 200,000 characters): mean KL
    divergence, its 99th percentile and how often the most likely token is unchanged. The same measurement `tune`
    makes for every pair on its front; results are cached per model file and pair.

    \b
    Examples:
      llamalab quality ~/models/qwen3-8b-q4_k_m.gguf
      llamalab quality gemma.gguf --kv q8_0/q8_0,q4_0/q4_0
    """
    from .llamacpp import models
    from .paths import cache_home
    from .run import quality as qmod
    from .run import session
    from .run.progress import RichProgress, StderrProgress
    from .study.spec import TuneSpec

    pairs = [p.strip() for p in kv.split(",") if p.strip()]
    from pydantic import ValidationError

    try:  # the pairs' spelling, checked as a study's is
        TuneSpec(kv=["f16/f16", *[p for p in pairs if p != "f16/f16"]])
    except ValidationError as e:
        raise ConfigError(f"--kv {kv}: {e.errors()[0]['msg']}",
                          tip="give pairs like f16/q8_0,q8_0/q8_0,q4_0/q4_0.") from None
    info = models.read_info(Path(model).expanduser())
    if qmod.is_synthetic(info.name):
        raise ConfigError(f"{model} is a synthetic model: its weights are random, so what a KV cache changes in its "
                          "output means nothing.", tip="measure a real model file.")
    st, _ = _load_study("tune", ["devices.vram=[]"], False)  # the backend this machine has (auto), its default build
    progress = RichProgress() if sys.stderr.isatty() else StderrProgress()
    try:
        prep = session.prepare(st, _options(llama_cpp=llama_cpp, model=info.path), progress)
        art = prep.artifacts[st.builds[0].name]
        with tempfile.TemporaryDirectory(prefix="llamalab-quality-") as logs:
            q = qmod.for_pairs(art.binary("llama-perplexity"), info.path, info.fingerprint, Path(prep.source.path),
                               [p for p in pairs if p != "f16/f16"], cache_home(), Path(logs), art.env(), progress)
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(q.as_dict(), indent=2))
    else:
        from .report.tables import markdown_table

        rows = [[p, f"{k['mean']:.5f} ± {k['mean_err']:.5f}", f"{k['p99']:.4f}" if k.get("p99") is not None else "–",
                 f"{k['same_top_pct']:.2f}%" if k.get("same_top_pct") is not None else "–",
                 f"{k['ppl_ratio']:.4f}" if k.get("ppl_ratio") is not None else "–"]
                for p, k in q.by_pair.items()]
        click.echo(markdown_table(["K/V cache", "Mean KLD", "99% KLD", "Same top token", "PPL ratio"], rows))
        click.echo(f"\nagainst f16/f16 over {q.corpus.get('chars', 0):,} characters of {qmod.CORPUS_NAME}; "
                   f"{q.as_dict()['method']}" + "".join(f"\n{n}" for n in q.notes))
    if not q.measured:
        sys.exit(1)


@cli.command(context_settings=CONTEXT)
@click.argument("model")  # a path (checked by standin: says FIFO, symlink loop …) or a remote reference
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the stand-in.")
def stub(model, output) -> None:
    """Write a header-only stand-in of a GGUF model: its real header, then a sparse hole up to the model's full
    size. It takes a few MiB of disk, and `llamalab plan --model` accepts it (a dry run never reads weights).
    MODEL may be the whole file, only its first MiB (e.g. `head -c 64M model.gguf > head.gguf`), or a remote
    model (hf://OWNER/REPO/FILE.gguf, hf://OWNER/REPO:QUANT, https://…/FILE.gguf, ollama://NAME:TAG), whose header
    alone is fetched with Range requests.

    \b
    Examples:
      llamalab stub ~/models/llama-70b-q4_k_m.gguf -o llama-70b.stub.gguf
      llamalab stub hf://unsloth/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf -o qwen3-8b.stub.gguf
    """
    from .llamacpp import standin

    path = _model_path(model, command="stub")
    assert path is not None  # MODEL is a required argument
    out = standin.write(path, output)
    st = out.stat()
    click.echo(f"wrote {out}: {st.st_size / 2**30:.2f} GiB as the model, {st.st_blocks * 512 / 2**20:.1f} MiB on disk",
               err=True)


def entry(argv: list[str] | None = None) -> int:
    """Run one command line and return its exit code: a LlamalabError (or a refusal of the file system) is printed
    as one `error:` line and a `tip:` line, never raised."""
    try:
        cli.main(args=argv, standalone_mode=False, prog_name="llamalab")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except click.exceptions.Abort:
        proc.terminate_all()
        click.echo("interrupted.", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except KeyboardInterrupt:
        stopped = proc.terminate_all()
        click.echo(f"interrupted; stopped {stopped} child process(es). Rerun the same command to resume.", err=True)
        return Interrupted.exit_code
    except LlamalabError as e:
        from .safetext import plain

        click.echo(f"error: {plain(e.message)}", err=True)  # messages quote log lines and file names
        if e.tip:
            click.echo(f"tip: {plain(e.tip)}", err=True)
        return e.exit_code
    except OSError as e:  # the file system said no where no narrower error applied (read-only HOME, full disk …)
        proc.terminate_all()
        where = f" ({e.filename})" if e.filename else ""
        click.echo(f"error: {e.strerror or e}{where}.", err=True)
        click.echo("tip: llamalab writes builds under $LLAMALAB_HOME (default ~/.cache/llamalab) and results under "
                   "$LLAMALAB_DATA (default ~/.local/share/llamalab); point them, --db or -o at a writable place "
                   "with free space.", err=True)
        return 1
    return 0


def main() -> None:
    signal.signal(signal.SIGTERM, proc.request_stop)
    signal.signal(signal.SIGINT, proc.request_stop)
    sys.exit(entry())


if __name__ == "__main__":
    main()
