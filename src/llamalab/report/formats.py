"""The report formats, one table (`REGISTRY`: name, help, suffix, serialiser, companion files) that the CLI reads
for `--format`, and which files a report consists of. Pure: returns text and bytes; the CLI hands them to
`write.atomic_write`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import ConfigError

if TYPE_CHECKING:
    from .data import RunData


def _serialiser(ref: str) -> Callable[[RunData], Iterable[str]]:
    """`module:function` of `report/` (imported when first used: the CLI reads the registry without loading the
    renderers, scipy and matplotlib)."""
    module, _, function = ref.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function or "pieces")


@dataclass(frozen=True)
class Companion:
    """A file written beside the main one (with -o only)."""
    where: Callable[[Path], Path]  # its path, from the main file's
    serialiser: str  # `module:function` giving its text in pieces
    what: str  # what it is, in words (in errors about its path)
    without_output: str  # what `report` says on stderr when it writes to stdout, without -o


@dataclass(frozen=True)
class Format:
    """One report format: what `--format NAME` writes."""
    name: str
    help: str  # what the format holds, for `llamalab report --help`
    suffix: str  # the file suffix of its main file
    serialiser: str  # `module` (its `pieces(data)`) or `module:function`: the main file's text, in pieces
    companions: tuple[Companion, ...] = ()

    def pieces(self, data: RunData) -> Iterable[str]:
        return _serialiser(self.serialiser)(data)


def companion(output: Path) -> Path:
    """Where the configurations CSV goes next to a trials CSV: run.csv → run.configs.csv."""
    return output.with_name(f"{output.stem}.configs{output.suffix or '.csv'}")


# every format `llamalab report` writes: a new one is a module with `pieces(data)` and one line here
REGISTRY: dict[str, Format] = {f.name: f for f in (
    Format("md", "table and verdict", ".md", "markdown"),
    Format("csv", "one row per trial × request (with -o, also FILE.configs.csv: every ledger figure)", ".csv",
           "csvfile:trials_pieces", companions=(Companion(
               companion, "csvfile:configs_pieces", "the configurations CSV",
               "(the per-configuration ledger figures go to FILE.configs.csv when you pass -o FILE.csv)"),)),
    Format("json", "every stored figure plus the derived tables", ".json", "document"),
    Format("html", "one self-contained page", ".html", "html"),
    Format("forum", "a summary to paste into a forum thread: the memory and decision tables, three lines of verdict, "
           "the command, the versions (under 40 lines of Markdown)", ".md", "forum"),
)}
FORMATS = tuple(REGISTRY)


def beside(fmt: str, output: Path, path: Path) -> str:
    """What the file `path` written beside the main file `output` is, in words."""
    return next((c.what for c in get(fmt).companions if c.where(output) == path), "a companion file")


def help_text() -> str:
    """`--format`'s help: each format with what it holds."""
    return "; ".join(f"{f.name}: {f.help}" for f in REGISTRY.values()) + "."


def get(fmt: str) -> Format:
    try:
        return REGISTRY[fmt]
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}") from None


def render(data: RunData, fmt: str) -> str:
    """The main text of a report in one format (CSV: the trials × requests table)."""
    return "".join(pieces(data, fmt))


def pieces(data: RunData, fmt: str) -> Iterator[str]:
    """`render`'s text in pieces: CSV and JSON stream their trials (a run loaded with `requests=False` reads each
    trial's requests again as it is written), Markdown and HTML are one piece."""
    yield from get(fmt).pieces(data)


def files(data: RunData, fmt: str, output: Path) -> dict[Path, Iterable[str]]:
    """Every file of a report written to `output` (CSV is two files), each as pieces of text (`write.write_all`
    takes them)."""
    f = get(fmt)
    out: dict[Path, Iterable[str]] = {output: f.pieces(data)}
    for c in f.companions:
        out[c.where(output)] = _serialiser(c.serialiser)(data)
    return out


def plot_files(data: RunData, folder: Path, formats: tuple[str, ...] | None = None) -> dict[Path, bytes]:
    """The plots as `<folder>/<run id>-<plot>.<png|svg>` (`formats`: default `plots.FORMATS`): only inside `folder`
    (the id is checked, and so is every resolved path)."""
    from . import data as rdata
    from . import plots

    rid = rdata.file_id(data)
    names = {folder / f"{rid}-{name}": blob for name, blob in plots.render(data, formats or plots.FORMATS).items()}
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
