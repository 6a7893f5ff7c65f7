"""llama.cpp source: extraction from an sdist, sha256 pinning, and user checkouts."""

import io
import json
import tarfile

import pytest

from llamalab.llamacpp import source
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


class Index:
    """A real HTTP package index on 127.0.0.1 (PEP 691 JSON or PEP 503 HTML) serving the files it is given."""

    def __init__(self, files: dict[str, bytes], *, html: bool = False):
        import http.server
        import threading

        index = self
        self.files, self.html, self.requests = files, html, []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                index.requests.append(self.path)
                if self.path == "/simple/pkg/":
                    if index.html:
                        body = "".join(f'<a href="/files/{n}#sha256=00">{n}</a>' for n in index.files).encode()
                        ctype = "text/html"
                    else:
                        body = json.dumps({"files": [{"filename": n, "url": f"/files/{n}"} for n in index.files]}).encode()
                        ctype = "application/vnd.pypi.simple.v1+json"
                elif self.path.startswith("/files/") and self.path[7:] in index.files:
                    body, ctype = index.files[self.path[7:]], "application/octet-stream"
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _hostile_sdist(path, root, commit, hook_marker):
    """An sdist whose build hook would leave a marker file if anything ran it (pip download prepares metadata, which
    runs setup.py)."""
    _sdist(path, root, commit)
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        with tarfile.open(path, "r:gz") as src:
            for m in src:
                tar.addfile(m, src.extractfile(m) if m.isfile() else None)
        hook = f"open({str(hook_marker)!r}, 'w').write('the build hook ran')\n".encode()
        ti = tarfile.TarInfo(f"{root}/setup.py")
        ti.size = len(hook)
        tar.addfile(ti, io.BytesIO(hook))
    path.write_bytes(data.getvalue())


@pytest.fixture
def sdist_index(tmp_path):
    sd = tmp_path / "pkg-1.0.tar.gz"
    marker = tmp_path / "hook-ran"
    _hostile_sdist(sd, "pkg-1.0", "abc123", marker)
    idx = Index({"pkg-1.0.tar.gz": sd.read_bytes()})
    yield idx, sd, marker
    idx.close()


def test_download_checks_the_sha256_before_anything_reads_the_file(tmp_path, sdist_index):
    """A wrong pin (or a replaced file on the index): refused, nothing kept, the sdist's build hook never ran."""
    idx, sd, marker = sdist_index
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "f" * 64, 1, "abc123", "")
    with pytest.raises(SourceError) as e:
        source._download(tmp_path / "dl", pin, log=lambda s: None, index=idx.url)
    assert "refusing to unpack or build it" in e.value.message and source.sha256_file(sd) in e.value.message
    assert list((tmp_path / "dl").iterdir()) == [] and not marker.exists()
    assert idx.requests == ["/simple/pkg/", "/files/pkg-1.0.tar.gz"]


def test_a_tampered_cached_sdist_is_fetched_again(tmp_path, sdist_index):
    idx, sd, marker = sdist_index
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 1, "abc123", "")
    got = source._download(tmp_path / "dl", pin, log=lambda s: None, index=idx.url)
    assert got.read_bytes() == sd.read_bytes() and len(idx.requests) == 2
    assert source._download(tmp_path / "dl", pin, log=lambda s: None, index=idx.url) == got
    assert len(idx.requests) == 2  # a good cached copy is not fetched again
    got.write_bytes(got.read_bytes() + b"tampered")
    logs = []
    source._download(tmp_path / "dl", pin, log=logs.append, index=idx.url)
    assert got.read_bytes() == sd.read_bytes() and len(idx.requests) == 4
    assert any("does not have the pinned sha256" in m for m in logs)
    # and when the index serves a tampered file too, the tampered cache is refused, not used
    got.write_bytes(b"tampered")
    idx.files["pkg-1.0.tar.gz"] = b"tampered"
    with pytest.raises(SourceError, match="refusing"):
        source._download(tmp_path / "dl", pin, log=lambda s: None, index=idx.url)
    assert not got.exists() and not marker.exists()


def test_pinned_downloads_verifies_and_unpacks_without_running_anything(tmp_path, sdist_index, monkeypatch):
    idx, sd, marker = sdist_index
    monkeypatch.setenv("LLAMALAB_INDEX_URL", idx.url)
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 9, "abc123", "")
    src = source.pinned(tmp_path / "home", pin=pin, log=lambda s: None)
    assert src.commit == "abc123" and (src.path / "CMakeLists.txt").is_file() and not marker.exists()


def test_the_html_simple_api_works_too(tmp_path, sdist_index):
    idx, sd, marker = sdist_index
    idx.html = True
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 1, "abc123", "")
    assert source._download(tmp_path / "dl", pin, log=lambda s: None, index=idx.url).is_file()


def test_an_index_without_the_file_or_unreachable_is_a_clear_error(tmp_path, sdist_index):
    idx, sd, marker = sdist_index
    pin = source.Pin("pkg", "2.0", "pkg-2.0.tar.gz", "0" * 64, 1, "x", "")
    with pytest.raises(SourceError, match="is not listed at"):
        source._download(tmp_path / "dl", pin, log=lambda s: None, index=idx.url)
    idx.close()
    with pytest.raises(SourceError, match="could not download") as e:
        source._download(tmp_path / "dl", pin, log=lambda s: None, index=idx.url)
    assert "--llama-cpp" in e.value.tip and list((tmp_path / "dl").iterdir()) == []


def test_an_sdist_entry_outside_the_tree_is_refused(tmp_path):
    root = "pkg-1.0"
    sd = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sd, "w:gz") as tar:
        for name, data in ((f"{root}/.git/modules/vendor/llama.cpp/HEAD", b"abc\n"),
                           (f"{root}/vendor/llama.cpp/../../../../escape", b"x")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "0" * 64, 1, "abc", "")
    with pytest.raises(SourceError, match="will not unpack"):
        source._extract_vendor(sd, tmp_path / "home" / "src" / "x", pin)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "home" / "src" / "x").exists()


def test_the_real_pypi_file_with_a_wrong_pin_is_refused(tmp_path):
    """The same refusal against PyPI itself (a tiny sdist); skipped only where PyPI cannot be reached."""
    import httpx

    try:
        httpx.head("https://pypi.org/simple/six/", timeout=10)
    except httpx.HTTPError:
        pytest.skip("pypi.org is not reachable from here")
    pin = source.Pin("six", "1.16.0", "six-1.16.0.tar.gz", "f" * 64, 1, "x", "")
    with pytest.raises(SourceError, match="refusing to unpack or build it"):
        source._download(tmp_path, pin, log=lambda s: None)
    assert list(tmp_path.iterdir()) == []


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
