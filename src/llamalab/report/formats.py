"""Which renderer makes which format, and which files a report consists of. Pure: returns text and bytes;
the CLI hands them to `write.atomic_write`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import ConfigError
from . import csvfile, document, html, markdown, plots
from . import data as rdata
from .data import RunData

FORMATS = ("md", "csv", "json", "html")


def render(data: RunData, fmt: str) -> str:
    """The main text of a report in one format (CSV: the trials × requests table)."""
    return "".join(pieces(data, fmt))


def pieces(data: RunData, fmt: str) -> Iterator[str]:
    """`render`'s text in pieces: CSV and JSON stream their trials (a run loaded with `requests=False` reads each
    trial's requests again as it is written), Markdown and HTML are one piece."""
    if fmt == "md":
        yield markdown.render(data)
    elif fmt == "csv":
        yield from csvfile.trials_pieces(data)
    elif fmt == "json":
        yield from document.pieces(data)
    elif fmt == "html":
        yield html.render(data)
    else:
        raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")


def companion(output: Path) -> Path:
    """Where the configurations CSV goes next to a trials CSV: run.csv → run.configs.csv."""
    return output.with_name(f"{output.stem}.configs{output.suffix or '.csv'}")


def files(data: RunData, fmt: str, output: Path) -> dict[Path, Iterable[str]]:
    """Every file of a report written to `output` (CSV is two files), each as pieces of text (`write.write_all`
    takes them)."""
    out: dict[Path, Iterable[str]] = {output: pieces(data, fmt)}
    if fmt == "csv":
        out[companion(output)] = csvfile.configs_csv(data)
    return out


def plot_files(data: RunData, folder: Path, formats: tuple[str, ...] = plots.FORMATS) -> dict[Path, bytes]:
    """The plots as `<folder>/<run id>-<plot>.<png|svg>`: only inside `folder` (the id is checked, and so is
    every resolved path)."""
    rid = rdata.file_id(data)
    names = {folder / f"{rid}-{name}": blob for name, blob in plots.render(data, formats).items()}
    for path in names:
        inside(path, folder)
    return names


def inside(path: Path, folder: Path) -> Path:
    """`path` if its folder resolves to `folder` (the file itself is not followed: a link there is refused when it
    is written); a ConfigError otherwise."""
    path = Path(path)
    if path.name in ("", ".", "..") or path.parent.resolve() != Path(folder).resolve():
        raise ConfigError(f"{path} would be written outside {folder}; nothing was written.",
                          tip="report file names come from run ids; import the run again from a good export.")
    return path
