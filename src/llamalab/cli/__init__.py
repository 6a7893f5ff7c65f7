"""The command line: argv → library calls; a LlamalabError → one message, its tip and an exit code. No logic here.

`app` holds the click group and the exit codes; one module per group of commands registers its commands on it
(`study`: demo, run, build; `results`: report, runs, compare, export, import; `inspect`: inspect, doctor; `plan`:
plan, bisect, stub; `tune`: tune, quality); `common` holds what they share.
"""

from __future__ import annotations

import signal
import sys

import click

from ..core import proc
from ..core.errors import Interrupted, LlamalabError
from . import inspect, plan, results, study, tune  # noqa: F401 - each registers its commands on the group
from .app import cli


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
        from ..core.safetext import plain

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

