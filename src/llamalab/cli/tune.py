"""`llamalab tune` (the llama-server command for a rig) and `llamalab quality` (a KV cache type's KL divergence).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .app import CONTEXT, EXIT_NOTHING_MEASURED, EXIT_SOME_FAILED, cli
from .common import (
    DOWNLOAD_HELP,
    LLAMA_BIN_HELP,
    TRUST_HELP,
    bin_override,
    load_study,
    model_arg,
    new_progress,
    open_store,
    rich_table,
    run_options,
)

if TYPE_CHECKING:
    from ..setup.options import RunOptions


def finite(ctx, param, value):
    """A number option that is a number: nan and inf are refused here, naming the option (not the preset they
    would have been written into)."""
    import math

    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number.", ctx=ctx, param=param)
    return value


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
@click.option("--min-gen-tps", type=click.FloatRange(0), default=None, metavar="X", callback=finite,
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
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S", callback=finite,
              help="Stage two's time budget: no member gets trials beyond its screening one once S seconds are "
                   "spent; the report says what was left undecided (sets [tune] seconds).")
@click.option("--max-kld", type=click.FloatRange(0), default=None, metavar="X", callback=finite,
              help="Rule out KV cache pairs whose mean KL divergence against f16/f16 (llama-perplexity, measured "
                   "in stage one on a real model) is above X (sets [tune] max_kld).")
@click.option("--engines", "engine_names", default=None, metavar="NAMES",
              help="The engines whose members are searched and raced, comma-separated: llama.cpp (always: every "
                   "member is measured against its default) and ik_llama.cpp (the study's build of it, else its "
                   "pinned release; its members come from real loads: it has no dry run). Sets [tune] engines; "
                   "default: llama.cpp.")
@click.option("--emit", type=click.Choice(["command", "llama-swap"]), default="command", show_default=True,
              help="What to print after the table: the llama-server command, or the pick as a llama-swap "
                   "config.yaml entry (models: NAME: cmd: …, with ${PORT}).")
@click.option("--fresh", is_flag=True, help="Start a new run even if this tune has an unfinished one, and dry-run "
              "stage one again rather than reuse an earlier tune's (same search, model, build and budgets).")
@click.option("--json", "as_json", is_flag=True, help="Print the search, the front and the pick as JSON.")
@click.option("--trust-study", "trust", is_flag=True, help=TRUST_HELP)
def tune(study, model, download, budget, goal, min_context, min_gen_tps, parallel, overrides, llama_cpp, llama_bin, db,
         logs_dir, exhaustive, seconds, max_kld, engine_names, emit, fresh, as_json, trust) -> None:
    """Find the llama-server command for this rig and this model. Stage one dry-runs the search space — split mode
    (layer with and without pipeline parallelism, tensor, none), -ts layer splits, K and V cache types, -ub, and
    --n-cpu-moe for MoE models, each only where it applies — and keeps the feasible, non-dominated candidates
    (seconds, no weight loaded); with --engines llama.cpp,ik_llama.cpp, also ik_llama.cpp's own default and
    llama.cpp's front as ik_llama.cpp runs it, measured by real loads. Stage two runs those fronts and llama.cpp's
    default (--fit, no flags) for real with the study's workload, and prints the front, the pick for the goal and
    its exact command (with the pick's engine's llama-server). The run is
    stored: `llamalab report` renders it with a plot of the front. STUDY defaults to the `tune` preset; its
    [tune] section holds these options (docs/tune.md). Exit codes as for `llamalab run`.

    \b
    Examples:
      llamalab tune tune-demo                              # CPU only: two rpc-servers, 300 MiB budgets
      llamalab tune --model ~/models/qwen3-8b-q4_k_m.gguf --budget 16GiB,12GiB
      llamalab tune --model qwen3-30b-a3b-q8_0.gguf --budget 24GiB --goal throughput --parallel 4
      llamalab tune tune-demo --engines llama.cpp,ik_llama.cpp    # ik_llama.cpp's members raced too
      llamalab tune --model hf://unsloth/Qwen3-8B-GGUF:Q4_K_M --budget 16GiB,12GiB   # stage one, from the header
    """
    from ..tune import tune as tunemod

    sets, model_path, remote = _tune_model([*overrides, *bin_override(llama_bin)], model)
    for key, value in (("goal", goal), ("min_context", min_context), ("min_gen_tps", min_gen_tps),
                       ("parallel", parallel), ("exhaustive", exhaustive), ("seconds", seconds),
                       ("max_kld", max_kld)):
        if value is not None:
            sets.append(f"tune.{key}={json.dumps(value)}")
    if engine_names is not None:
        sets.append(f"tune.engines={json.dumps([e.strip() for e in engine_names.split(',') if e.strip()])}")
    st, _ = load_study(study or "tune", sets, trust)
    if remote:
        model_path = model_arg(model, command="tune", weights=download, download=download)
    opts = run_options(llama_cpp=llama_cpp, model=model_path, budget=budget, db=db, logs_dir=logs_dir, fresh=fresh,
                    stage_one_only=remote and not download)
    open_store(opts)
    progress = new_progress()
    try:
        result = tunemod.run_tune(st, opts, progress)
    finally:
        progress.close()
    if result.run_id is None:  # a header-only stand-in: stage one only
        from ..report import data as rdata
        from ..report.views import stage_one as tune_stage_one

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
    from ..models.remote import ref as modelref

    model_path = None
    remote = model is not None and modelref.is_reference(model)
    if model is not None and remote:
        modelref.parse(model)
    elif model is not None:
        from ..models import synthetic as models

        if Path(model).expanduser().exists() or model not in models.PRESETS:
            model_path = Path(model).expanduser()
        else:
            sets.append(f"model.preset={json.dumps(model)}")
    return sets, model_path, remote


def _tune_outcome(opts: RunOptions, run_id: str, emit: str, as_json: bool) -> None:
    """A tune's stored run: its report written, the front and the pick printed (or the llama-swap entry), and the
    exit code as for `llamalab run`."""
    from ..core.write import atomic_write
    from ..report import data as rdata
    from ..report import markdown
    from ..report.analysis import tune as rtune
    from ..run import runner
    from ..store.db import Store

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


def _print_stage_one(doc: dict) -> None:
    """Tune's stage one alone (the model is a header-only stand-in): the verified front and llama.cpp's default."""
    from rich.console import Console

    from ..core.safetext import rich_text as T
    from ..report.views import stage_one as tune_stage_one

    console = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)
    console.print(rich_table("tune — stage one (dry runs): the predicted front, verified",
                         *tune_stage_one.front_table(doc)))
    for line in tune_stage_one.lines(doc):
        console.print(T("• " + line))


def _print_tune(view, command: bool = True) -> None:
    """The tune's front, pick and command on the terminal (every string a Text of `safetext.plain`)."""
    from rich.console import Console

    from ..core.safetext import rich_text as T
    from ..report.analysis import tune as rtune

    console = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)
    if view is None:
        console.print(T("this run holds no tune"))
        return
    console.print(rich_table(f"tune — run {view.run_id}: the front, measured", *rtune.front_table(view)))
    for line in rtune.lines(view):
        console.print(T("• " + line))
    console.print(T("\nPick.", "bold") + T(" " + " ".join(filter(None, (view.pick_sentence, view.versus_default)))))
    if command:  # as one line, never wrapped by the console: a pasted copy is the command (piped or at 80 columns)
        console.print(T(view.command), soft_wrap=True)


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
    from ..quality import kv as qmod

    st, _ = load_study("tune", ["devices.vram=[]"], False)  # the backend this machine has (auto), its default build
    progress = new_progress()
    try:
        q = qmod.for_model(Path(model).expanduser(), kv, st, run_options(llama_cpp=llama_cpp), progress)
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(q.as_dict(), indent=2))
    else:
        from ..report.analysis.tables import markdown_table

        rows = [[p, f"{k['mean']:.5f} ± {k['mean_err']:.5f}", f"{k['p99']:.4f}" if k.get("p99") is not None else "–",
                 f"{k['same_top_pct']:.2f}%" if k.get("same_top_pct") is not None else "–",
                 f"{k['ppl_ratio']:.4f}" if k.get("ppl_ratio") is not None else "–"]
                for p, k in q.by_pair.items()]
        click.echo(markdown_table(["K/V cache", "Mean KLD", "99% KLD", "Same top token", "PPL ratio"], rows))
        click.echo(f"\nagainst f16/f16 over {q.corpus.get('chars', 0):,} characters of {qmod.CORPUS_NAME}; "
                   f"{q.as_dict()['method']}" + "".join(f"\n{n}" for n in q.notes))
    if not q.measured:
        sys.exit(1)

