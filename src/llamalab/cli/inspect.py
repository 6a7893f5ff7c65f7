"""`llamalab inspect` (any llama.cpp log's memory ledger) and `llamalab doctor` (what this machine can build and
run).
"""

from __future__ import annotations

import json

import click

from ..core.errors import ConfigError
from ..logs import rawlines
from .app import CONTEXT, cli


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
    from ..llamacpp import argv
    from ..logs import inspect as inspect_view
    from ..logs import ledger

    split = None
    if tensor_split is not None:
        split = argv.tensor_split(["-ts", tensor_split])
        if not split:
            raise ConfigError(f"--tensor-split {tensor_split!r} is not a list of numbers.",
                              tip="give the proportions as llama-server takes them, e.g. --tensor-split 3,1")
        if min(split) < 0 or not sum(split) > 0:
            raise ConfigError(f"--tensor-split {tensor_split!r}: the proportions are numbers ≥ 0, at least one above "
                              "0.", tip="give the proportions as llama-server takes them, e.g. --tensor-split 3,1")
    led = ledger.parse(rawlines.lines_of(iter(lambda: log.read(1 << 20), "")), tensor_split=split)  # streamed
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
    from ..machine import doctor as doctormod

    rep = doctormod.examine()
    click.echo(json.dumps(rep.to_json(), indent=2) if as_json else doctormod.render(rep), nl=as_json)

