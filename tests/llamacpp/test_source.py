"""llama.cpp source: extraction from an sdist, sha256 pinning, and user checkouts."""

import contextlib
import http.server
import io
import json
import tarfile
import threading

import httpx
import pytest

from llamalab.core.errors import SourceError
from llamalab.llamacpp import source


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
    assert src.version == "b123"
    assert src.cmake_defines() == {"LLAMA_BUILD_NUMBER": "123", "LLAMA_BUILD_COMMIT": "abc123"}


def test_pinned_reuses_an_extracted_tree_without_network(tmp_path):
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "0" * 64, 7, "c0ffee", "2026-01-01")
    sd = tmp_path / "pkg-1.0.tar.gz"
    _sdist(sd, "pkg-1.0", "c0ffee")
    source._extract_vendor(sd, tmp_path / "home" / "src" / "llama.cpp-b7", pin)
    got = source.pinned(tmp_path / "home", pin=pin, log=lambda s: None)
    assert got.commit == "c0ffee" and got.origin == "pypi:pkg==1.0"


class Index:
    """A package index (PEP 691 JSON or PEP 503 HTML) serving the files it is given: in process, as the transport of
    llamalab's own HTTP client (`transport`), or as a real HTTP server on 127.0.0.1 (`serve`). `down` makes every
    request fail the way an unreachable host does."""

    def __init__(self, files: dict[str, bytes], *, html: bool = False):
        self.files, self.html, self.requests, self.down = files, html, [], False
        self.url = "http://index.test/simple"
        self.transport = httpx.MockTransport(self.answer)

    def answer(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        path = request.url.path.removeprefix("/simple")
        self.requests.append(path)
        if path == "/pkg/":
            if self.html:
                body = "".join(f'<a href="/files/{n}#sha256=00">{n}</a>' for n in self.files).encode()
                return httpx.Response(200, headers={"Content-Type": "text/html"}, content=body)
            body = json.dumps({"files": [{"filename": n, "url": f"/files/{n}"} for n in self.files]}).encode()
            return httpx.Response(200, headers={"Content-Type": "application/vnd.pypi.simple.v1+json"}, content=body)
        if path.startswith("/files/") and path[7:] in self.files:
            return httpx.Response(200, headers={"Content-Type": "application/octet-stream"},
                                  content=self.files[path[7:]])
        return httpx.Response(404)

    def download(self, folder, pin, log=lambda s: None):
        return source._download(folder, pin, log=log, index=self.url, transport=self.transport)

    @contextlib.contextmanager
    def serve(self):
        """The same index as a real HTTP server on 127.0.0.1; yields its URL."""
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                r = index.answer(httpx.Request("GET", "http://index.test" + self.path))
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/simple"
        finally:
            server.shutdown()
            server.server_close()


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
    yield Index({"pkg-1.0.tar.gz": sd.read_bytes()}), sd, marker


def test_download_checks_the_sha256_before_anything_reads_the_file(tmp_path, sdist_index):
    """A wrong pin (or a replaced file on the index): refused, nothing kept, the sdist's build hook never ran."""
    idx, sd, marker = sdist_index
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "f" * 64, 1, "abc123", "")
    with pytest.raises(SourceError) as e:
        idx.download(tmp_path / "dl", pin)
    assert "refusing to unpack or build it" in e.value.message and source.sha256_file(sd) in e.value.message
    assert list((tmp_path / "dl").iterdir()) == [] and not marker.exists()
    assert idx.requests == ["/pkg/", "/files/pkg-1.0.tar.gz"]


def test_a_tampered_cached_sdist_is_fetched_again(tmp_path, sdist_index):
    idx, sd, marker = sdist_index
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 1, "abc123", "")
    got = idx.download(tmp_path / "dl", pin)
    assert got.read_bytes() == sd.read_bytes() and len(idx.requests) == 2
    assert idx.download(tmp_path / "dl", pin) == got
    assert len(idx.requests) == 2  # a good cached copy is not fetched again
    got.write_bytes(got.read_bytes() + b"tampered")
    logs = []
    idx.download(tmp_path / "dl", pin, log=logs.append)
    assert got.read_bytes() == sd.read_bytes() and len(idx.requests) == 4
    assert any("does not have the pinned sha256" in m for m in logs)
    # and when the index serves a tampered file too, the tampered cache is refused, not used
    got.write_bytes(b"tampered")
    idx.files["pkg-1.0.tar.gz"] = b"tampered"
    with pytest.raises(SourceError, match="refusing"):
        idx.download(tmp_path / "dl", pin)
    assert not got.exists() and not marker.exists()


def test_pinned_downloads_verifies_and_unpacks_without_running_anything(tmp_path, sdist_index, monkeypatch):
    idx, sd, marker = sdist_index
    monkeypatch.setenv("LLAMALAB_INDEX_URL", idx.url)
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 9, "abc123", "")
    src = source.pinned(tmp_path / "home", pin=pin, log=lambda s: None, transport=idx.transport)
    assert src.commit == "abc123" and (src.path / "CMakeLists.txt").is_file() and not marker.exists()
    assert idx.requests == ["/pkg/", "/files/pkg-1.0.tar.gz"]


def test_two_processes_asking_at_once_fetch_and_unpack_once(tmp_path, sdist_index, monkeypatch):
    """`make test`'s workers (or two studies) may ask for the pinned tree together: one fetches and unpacks under
    the lock, the other waits and takes that tree (flock is per open file, so two threads stand for two processes)."""
    from concurrent.futures import ThreadPoolExecutor

    idx, sd, _ = sdist_index
    monkeypatch.setenv("LLAMALAB_INDEX_URL", idx.url)
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 9, "abc123", "")
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: source.pinned(tmp_path / "home", pin=pin, log=lambda s: None,
                                                     transport=idx.transport), range(2)))
    assert got[0].path == got[1].path and (got[0].path / "CMakeLists.txt").is_file()
    assert idx.requests == ["/pkg/", "/files/pkg-1.0.tar.gz"]  # one download, not two


def test_pinned_refuses_a_wrong_sha256_and_extracts_nothing(tmp_path, sdist_index, monkeypatch):
    """The refusal through the function `llamalab run` calls: no tree, no download kept, no build hook run."""
    idx, sd, marker = sdist_index
    monkeypatch.setenv("LLAMALAB_INDEX_URL", idx.url)
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "e" * 64, 9, "abc123", "")
    with pytest.raises(SourceError, match="refusing to unpack or build it"):
        source.pinned(tmp_path / "home", pin=pin, log=lambda s: None, transport=idx.transport)
    assert not (tmp_path / "home" / "src").exists() and list((tmp_path / "home" / "downloads").iterdir()) == []
    assert not marker.exists() and idx.requests == ["/pkg/", "/files/pkg-1.0.tar.gz"]


def test_the_html_simple_api_works_too(tmp_path, sdist_index):
    idx, sd, marker = sdist_index
    idx.html = True
    pin = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 1, "abc123", "")
    assert idx.download(tmp_path / "dl", pin).is_file()


def test_an_index_without_the_file_or_unreachable_is_a_clear_error(tmp_path, sdist_index):
    idx, sd, marker = sdist_index
    pin = source.Pin("pkg", "2.0", "pkg-2.0.tar.gz", "0" * 64, 1, "x", "")
    with pytest.raises(SourceError, match="is not listed at"):
        idx.download(tmp_path / "dl", pin)
    idx.down = True
    with pytest.raises(SourceError, match="could not download pkg-2.0.tar.gz: .*Connection refused") as e:
        idx.download(tmp_path / "dl", pin)
    assert "--llama-cpp" in e.value.tip and list((tmp_path / "dl").iterdir()) == []


def test_a_real_http_index_on_loopback(tmp_path, sdist_index, loopback):
    """The same index over a real socket: the JSON page, the file, and the sha256 refusal; then an index that no
    longer listens."""
    idx, sd, marker = sdist_index
    good = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", source.sha256_file(sd), 1, "abc123", "")
    bad = source.Pin("pkg", "1.0", "pkg-1.0.tar.gz", "f" * 64, 1, "abc123", "")
    with idx.serve() as url:
        assert source._download(tmp_path / "ok", good, log=lambda s: None, index=url).read_bytes() == sd.read_bytes()
        with pytest.raises(SourceError, match="refusing to unpack or build it"):
            source._download(tmp_path / "dl", bad, log=lambda s: None, index=url)
    assert list((tmp_path / "dl").iterdir()) == [] and not marker.exists()
    with pytest.raises(SourceError, match="could not download"):
        source._download(tmp_path / "dl", bad, log=lambda s: None, index=url)


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


@pytest.mark.network
def test_the_real_pypi_file_with_a_wrong_pin_is_refused(tmp_path):
    """The same refusal against PyPI itself (a tiny sdist). It needs the internet (marked `network`: `make test`
    runs it, the fast suite does not) and fails where PyPI cannot be reached."""
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
