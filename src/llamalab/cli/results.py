"""`llamalab report`, `runs`, `compare`, `export` and `import`: stored runs rendered, listed, compared and moved
between databases.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import IO

import click

from ..core.errors import ConfigError
from ..report import formats as report_formats  # the format registry alone: its renderers load when used
from .app import CONTEXT, cli


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
    from ..core.paths import default_db
    from ..report import data as rdata
    from ..store.db import Store

    db = db or default_db()
    # the trials keep only their requests' speed figures; CSV and JSON read every request again as they write it,
    # so the database stays open until the report is written
    with Store(db, readonly=True) as store:
        data = rdata.load(store, run_id, requests=False)
        from ..core.write import Target, db_files, write_all

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
    from ..core.paths import default_db
    from ..store.db import Store

    with Store(db or default_db(), readonly=True) as store:
        items = store.runs()
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    if not items:
        click.echo("no runs stored yet; `llamalab demo` makes one.", err=True)
    from ..core.safetext import one_line

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
    from ..core.paths import default_db
    from ..report import data as rdata
    from ..store.db import Store

    with Store(db or default_db(), readonly=True) as store:
        a, b = rdata.load(store, run_a, requests=False), rdata.load(store, run_b, requests=False)
    from ..core.safetext import plain
    from ..report.analysis import compare as cmp  # its statistics (scipy) load once both runs are found

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
    from ..core.paths import default_db
    from ..core.write import atomic_write, db_files
    from ..store import exchange
    from ..store.db import Store

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
    from ..core.paths import default_db
    from ..store import exchange
    from ..store.db import Store

    source = _Source(file)
    try:  # read twice as a stream: checked whole before the database is opened, then put in one transaction
        checked = exchange.check(exchange.scan(source.pieces()), name=str(file))
        with Store(db or default_db()) as store:
            result = exchange.import_file(store, lambda: exchange.scan(source.pieces(check=True)), checked)
    finally:
        source.close()
    from ..core.safetext import plain

    click.echo(plain(result.message))  # it names the imported run: someone else's text

