"""What the commands share: the study and model options, the study as the user may run it (trust), the one
options object, the progress display, the database check before a run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..core.errors import ConfigError
from ..store import runids

if TYPE_CHECKING:
    from ..setup.options import RunOptions

TRUST_HELP = ("Run a study file that asks for what can run code or open this machine to the network (listed when "
              "refused; see docs/study-files.md): a study file from someone else is a script.")


def load_study(ref: str, overrides, trust: bool):
    """A study, refused when its file asks for what only the user can allow (trust.risks): the file cannot vouch for
    itself, so the word is a flag on the command line. Presets and the user's own --set/--host are trusted."""
    from ..study import spec as studymod
    from ..study import trust as trustmod

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


def bin_override(llama_bin: Path | None) -> list[str]:
    """--llama-bin DIR as the study key it sets (an absolute path, so the stored study says which binaries)."""
    if llama_bin is None:
        return []
    p = llama_bin.expanduser()
    return [f"source.bin={json.dumps(str(p if p.is_absolute() else Path.cwd() / p))}"]


MODEL_HELP = ("A GGUF model: a file (or only the first MiB of one), or a remote one read by its header alone: "
              "hf://OWNER/REPO/FILE.gguf (@REVISION), hf://OWNER/REPO:QUANT, https://…/FILE.gguf, ollama://NAME:TAG.")


DOWNLOAD_HELP = ("With a remote --model (hf://, https://, ollama://): fetch its weights (progress bar, resumable; "
                 "hf:// into Hugging Face's own cache, checked against the published sha256).")


def new_progress():
    from ..setup.progress import RichProgress, StderrProgress

    return RichProgress() if sys.stderr.isatty() else StderrProgress()


def model_arg(model: str | None, *, command: str, weights: bool = False, download: bool = False) -> Path | None:
    """--model as a path llama.cpp opens: a local file as it is; a remote reference (models.remote.ref) as its
    header-only stand-in, or with `weights` the whole model — fetched only with --download, else refused before
    anything starts. `stub` takes one file: a split model is refused before any part is read."""
    if model is None:
        return None
    from ..models.remote import ref as modelref

    if not modelref.is_reference(model):
        return Path(model).expanduser()
    modelref.parse(model)  # a malformed reference is said before anything else
    if weights and not download:
        from ..core.errors import ModelError

        shown = modelref.shown(model)
        raise ModelError(f"`llamalab {command}` runs {shown} for real, so it needs the model's weights, and without "
                         "--download llamalab fetches only its header.",
                         tip=f"pass --download to fetch the weights (resumable; hf:// into Hugging Face's own cache), "
                             f"or `llamalab plan --model {shown}` for the memory answers from the header alone.")
    from ..core.paths import cache_home
    from ..models.remote import source as modelsource

    progress = new_progress()
    try:
        res = modelsource.resolve(model, cache_home(), weights=weights, log=progress.message,
                                  on_download=progress.download, split_ok=command != "stub")
    finally:
        progress.close()
    click.echo(res.note, err=True)  # one line without control sequences (names come from servers)
    return res.path


def study_options(f):
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


def run_options(*, budget: str | None = None, db: Path | None = None, **given: Any) -> RunOptions:
    """The one options object of run, plan, tune and bisect (and build, quality, the repository table) from the
    command line: --budget parsed once into MiB, the default database where --db is not given, the rest as given."""
    from ..core.paths import default_db
    from ..setup.options import RunOptions, parse_budget_option

    return RunOptions(budgets_mib=parse_budget_option(budget), db=db or default_db(), **given)


def open_store(opts: RunOptions, resume: str | None = None) -> None:
    """Before anything is built or run: the database opens, is sound, no other run is being measured in it, and a
    run to resume is one this machine made."""
    from ..store.db import Store

    if resume:
        runids.check_ref(resume, "--resume")
    with Store(opts.db) as store:
        store.check()
        store.refuse_if_busy()
        if resume:
            store.resumable(resume)


def host_overrides(host: str) -> list[str]:
    """`--host ADDR`: llama-server listens on ADDR; local rpc-servers too where ADDR is IPv4 (rpc-server binds IPv4
    only), else on 127.0.0.1 for a loopback name (::1, localhost). Any other IPv6 address or name is refused."""
    from ..core import net
    from ..study import endpoints, trust

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


def rich_table(title: str, head: list[str], body: list[list[str]], left: int = 2):
    """A rich table of a tune's front: every cell a Text of `safetext.plain`, the first `left` columns left."""
    from rich.table import Table

    from ..core.safetext import rich_text as T

    t = Table(title=T(title))
    for i, h in enumerate(head):
        t.add_column(T(h), justify="left" if i < left else "right")
    for row in body:
        t.add_row(*[T(c) for c in row])
    return t

