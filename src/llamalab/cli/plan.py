"""`llamalab plan`, `bisect` and `stub`: memory answers from dry runs (a study, a repository's quants, a commit
range) and header-only stand-ins.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..core.errors import ConfigError
from .app import CONTEXT, cli
from .common import MODEL_HELP, TRUST_HELP, bin_override, load_study, model_arg, new_progress, run_options


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
@click.option("--max-models", type=click.IntRange(1), default=None, metavar="N",
              help="With hf://OWNER/REPO: plan up to N models (default 64; a repository with more is refused "
                   "before any header is read).")
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
def plan(study, model, overrides, budget, context, markdown, max_models, download, target, llama_cpp, llama_bin,
         logs_dir, as_json, trust) -> None:
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

    from ..models.remote import ref as modelref
    from ..plan import plan as planmod

    if model and modelref.is_reference(model):
        ref = modelref.parse(model)
        if isinstance(ref, modelref.HfRepo) and ref.quant is None:
            if download:
                raise ConfigError("--download with a whole repository would fetch every quant.",
                                  tip="pick one: --model hf://OWNER/REPO:Q4_K_M --download.")
            return _plan_repo(model, study, overrides, budget, context, markdown, llama_cpp, llama_bin, logs_dir,
                              as_json, trust, max_models)
    if context is not None or markdown or max_models is not None:
        raise ConfigError("--context, --markdown and --max-models belong to the repository table (--model "
                          "hf://OWNER/REPO).",
                          tip="for one model, -c N in the study's arguments plans that context: "
                              "--set 'server.args=[\"-c\",\"32768\"]'.")
    st, _ = load_study(study or "pipeline-parallel", [*overrides, *bin_override(llama_bin)], trust)
    opts = run_options(llama_cpp=llama_cpp, model=model_arg(model, command="plan", weights=download, download=download),
                    budget=budget, target=target, logs_dir=logs_dir)
    progress = new_progress()
    try:
        result = planmod.plan_study(st, opts, progress)
    finally:
        progress.close()
    if as_json:
        click.echo(planmod.dumps(result))
        return
    from ..report.views import plan as plan_view

    Console(width=200 if not sys.stdout.isatty() else None).print(plan_view.render(result))


def _plan_repo(model, study, overrides, budget, context, markdown, llama_cpp, llama_bin, logs_dir, as_json,
               trust, max_models) -> None:
    """`plan --model hf://OWNER/REPO`: every quant's stand-in, dry-run, in one table (plan.repo)."""
    from ..core.paths import cache_home
    from ..models.remote import source as modelsource
    from ..plan import repo as planrepo
    from ..report.views import planrepo as planrepo_view

    st, _ = load_study(study or "pipeline-parallel", [*overrides, *bin_override(llama_bin)], trust)
    progress = new_progress()
    try:
        found = modelsource.resolve_repo(model, cache_home(), log=progress.message,
                                         max_models=max_models or modelsource.MAX_MODELS)
        opts = run_options(llama_cpp=llama_cpp, budget=budget, context=context, logs_dir=logs_dir)
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
    from ..plan import bisect as bisectmod
    from ..setup.options import BisectTarget

    st, _ = load_study(config, overrides, trust)
    where = repo or (Path(st.source.llama_cpp) if st.source.llama_cpp else Path.cwd())
    opts = run_options(model=model_arg(model, command="bisect", weights=download, download=download), budget=budget,
                    logs_dir=logs_dir, bisect=BisectTarget(repo=where, good=good, bad=bad, metric=metric,
                                                           build=build_name, setting=setting_name))
    progress = new_progress()
    try:
        out = bisectmod.bisect(st, opts, progress)
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(out.to_json(), indent=2))
    else:
        click.echo(bisectmod.render(out, where.expanduser().resolve()), nl=False)


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
    from ..models import standin

    path = model_arg(model, command="stub")
    assert path is not None  # MODEL is a required argument
    out = standin.write(path, output)
    st = out.stat()
    click.echo(f"wrote {out}: {st.st_size / 2**30:.2f} GiB as the model, {st.st_blocks * 512 / 2**20:.1f} MiB on disk",
               err=True)

