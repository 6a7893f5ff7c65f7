"""A local stand-in for the Hugging Face Hub and the ollama registry, on 127.0.0.1, serving real files with Range.

What it reproduces is what llamalab's clients call, as their sources read (huggingface_hub 2.4):

- `HEAD /{repo}/resolve/{revision}/{path}` (`file_download.get_hf_file_metadata`, URL from `hf_hub_url`): a 302 to
  a *separate blob host* (another port: another origin, so `utils/_http._httpx2_follow_hub_redirects_with_backoff`
  stops there, as it does at a CDN) with `X-Repo-Commit`, `X-Linked-Etag` (the LFS sha256, quoted), `X-Linked-Size`
  and the pointer's `ETag`; a renamed repository answers a relative 307 first (followed: same origin). `GET` on it
  redirects the same way (`hf_hub_download` → `http_get`, which follows redirects).
- Errors with `X-Error-Code` as `utils/_http.hf_raise_for_status` reads them: `RepoNotFound` (401 without a token,
  as the hub answers for private and missing repositories), `GatedRepo` (401 without a token, 403 with one that may
  not read it), `RevisionNotFound` and `EntryNotFound` (404).
- `GET /api/models/{repo}` and `/api/models/{repo}/revision/{revision}` (`HfApi.model_info`): the commit (`sha`).
- `GET /api/models/{repo}/tree/{revision}?recursive=…&expand=…` (`hf_api.HfApi.list_repo_tree` →
  `_paginate_pages`): JSON entries `{type, oid, size, path, lfs: {oid, size, pointerSize}}`, in pages joined by a
  `Link: <…>; rel="next"` header.
- Authorization: `Authorization: Bearer TOKEN` (`utils/_headers.build_hf_headers`) for private and gated
  repositories.
- The ollama registry, as ollama's own client reads it (ollama/ollama server/images.go: `pullModelManifest`, the
  `ManifestV2`/`Layer` types, the media types in `GetModel`): `GET /v2/{namespace}/{name}/manifests/{tag}` (Accept
  `application/vnd.docker.distribution.manifest.v2+json`; layers with mediaType `application/vnd.ollama.image.model`,
  `…template`, `…params`, each a digest and a size), `GET /v2/{namespace}/{name}/blobs/sha256:…` → 307 to the blob
  host (the public registry redirects blobs to a CDN).
- Plain files at `/files/NAME` on the blob host (any web server: `ETag`, `Accept-Ranges: bytes`).

Blobs answer `Range: bytes=a-b` with 206 and `Content-Range`. Failure modes are switched per test (`hub.fail`):
`no-range` (200 with the whole file), `stall` (headers, then nothing), `busy:N` (the next N blob requests get 503),
`status:CODE` (every blob request), `manifest-no-model`, `listing-no-gguf`; and a hostile hub's (issue 45):
`listing:not-json`, `listing:wrong-shape`, `listing:digits`, `listing:trickle`, `listing:loop`, `listing:many:N`,
`listing:unsafe`, `manifest-nested`, `manifest-trickle`, `manifest-size-true`, and `claims` (a repository that
publishes another file's sha256). `hub.sent` counts body bytes sent per blob. Every loop is bounded. The server
never leaves 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from llamalab.llamacpp.source import sha256_file
from llamalab.models import synthetic as models

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
# A real model small enough to serve, download and run in seconds: 2 layers, a 20,000-token vocabulary (5.6 MB)
MICRO = models.ModelShape("micro", n_layer=2, n_embd=128, n_head=4, n_head_kv=2, n_ff=256, n_vocab=20000,
                          n_ctx_train=4096)
TOKEN = "hf_localtesttoken"
# the origins (API and blob host) of every Hub this process started, oldest first: a test that must clear what its
# own hubs left in a shared cache tells its entries from another session's by these
STARTED: list[str] = []


@dataclass
class Blob:
    path: Path
    sha256: str
    size: int


@dataclass
class Repo:
    files: dict[str, Blob]
    gated: bool = False
    private: bool = False
    revisions: tuple[str, ...] = ("main", COMMIT)
    renamed_from: str | None = None
    claims: dict[str, str] = field(default_factory=dict)  # path → the sha256 the hub claims (not the blob's own)


def identity(path: Path, sha256: str | None, salt: str = "") -> str:
    """The file's sha256 (with a `salt`, a digest of it and the salt: content new to llamalab's cache, for a test
    that must see it fetched); for a header-only stand-in (mostly a hole) a digest of its header and size instead,
    so that adding an 8 GB sparse file costs nothing (the tests never download those)."""
    if sha256:
        return sha256 if not salt else hashlib.sha256((sha256 + salt).encode()).hexdigest()
    size = path.stat().st_size
    if path.stat().st_blocks * 512 < size // 4:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(32 << 20) + str(size).encode() + salt.encode()).hexdigest()
    return identity(path, sha256_file(path), salt)


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    ollama: dict[tuple[str, str, str], dict] = field(default_factory=dict)  # (ns, name, tag) → manifest
    blobs: dict[str, Blob] = field(default_factory=dict)  # sha256 → blob
    urls: dict[str, Blob] = field(default_factory=dict)  # /files/NAME → blob
    fail: set[str] = field(default_factory=set)
    page_size: int = 1000
    sent: dict[str, int] = field(default_factory=dict)  # blob sha256 or file name → body bytes sent
    log: list[str] = field(default_factory=list)  # "METHOD path?query [Range]" of every request
    loops: int = 0  # listing:loop pages answered
    stop: threading.Event = field(default_factory=threading.Event)

    # ------------------------------------------------------------ content

    def add_repo(self, repo: str, files: dict[str, Path], *, gated: bool = False, private: bool = False,
                 sha256: dict[str, str] | None = None, renamed_from: str | None = None, salt: str = "",
                 claims: dict[str, str] | None = None) -> None:
        """A repository of `files` (path in it → a local file). `claims`: the sha256 the hub publishes for a path
        where it is not the file's (a repository or mirror that claims another model's hash)."""
        entries = {}
        for rel, p in files.items():
            digest = identity(Path(p), (sha256 or {}).get(rel), salt)
            b = Blob(path=Path(p), sha256=digest, size=Path(p).stat().st_size)
            self.blobs[digest] = b
            entries[rel] = b
        self.repos[repo] = Repo(files=entries, gated=gated, private=private, renamed_from=renamed_from,
                                claims=dict(claims or {}))

    def add_ollama(self, name: str, tag: str, path: Path | None, *, namespace: str = "library",
                   salt: str = "") -> None:
        layers = []
        if path is not None:
            digest = identity(Path(path), None, salt)
            self.blobs[digest] = Blob(path=Path(path), sha256=digest, size=Path(path).stat().st_size)
            layers.append({"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                           "size": Path(path).stat().st_size})
        template = hashlib.sha256(b"{{ .Prompt }}").hexdigest()
        layers += [{"mediaType": "application/vnd.ollama.image.template", "digest": f"sha256:{template}", "size": 14},
                   {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:" + "1" * 64, "size": 30}]
        self.ollama[(namespace, name, tag)] = {
            "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                       "digest": "sha256:" + "2" * 64, "size": 485}, "layers": layers}

    def add_url(self, name: str, path: Path) -> str:
        self.urls[name] = Blob(path=Path(path), sha256=identity(Path(path), None), size=Path(path).stat().st_size)
        return f"{self.blob_base}/files/{name}"

    # ------------------------------------------------------------ serving

    def __enter__(self) -> Hub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._api = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._blob = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        for s in (self._api, self._blob):
            s.daemon_threads = True
            # a short poll: shutdown() waits for serve_forever's next poll (0.5 s by default), twice a hub
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        STARTED.extend((self.endpoint, self.blob_base))
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for s in (self._api, self._blob):
            s.shutdown()
            s.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._api.server_address[1]}"

    @property
    def blob_base(self) -> str:
        return f"http://127.0.0.1:{self._blob.server_address[1]}"

    registry = endpoint

    def fetched(self) -> int:
        return sum(self.sent.values())


class _Handler(BaseHTTPRequestHandler):
    hub: Hub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # the client closed early (no-range, Ctrl-C, a timeout)
            pass

    # helpers
    def _send(self, code: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, code: int, error_code: str | None = None, message: str = "") -> None:
        h = {"Content-Type": "application/json"}
        if error_code:
            h["X-Error-Code"] = error_code
        if message:
            h["X-Error-Message"] = message
        self._send(code, h, json.dumps({"error": message or error_code or str(code)}).encode())

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        hub = self.hub
        url = urllib.parse.urlsplit(self.path)
        hub.log.append(f"{self.command} {self.path}" + (f" [{self.headers['Range']}]" if self.headers.get("Range")
                                                        else ""))
        path = urllib.parse.unquote(url.path)
        try:
            if path.startswith("/api/models/"):
                return self._tree(path[len("/api/models/"):], url.query)
            if path.startswith("/v2/"):
                return self._registry(path)
            if path.startswith("/blobs/"):
                b = hub.blobs.get(path[len("/blobs/"):])
                return self._blob(b, b.sha256 if b else "") if b else self._error(404)
            if path.startswith("/files/"):
                name = path[len("/files/"):]
                return self._blob(hub.urls.get(name), name) if name in hub.urls else self._error(404)
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                return self._resolve(m.group(1), m.group(2), m.group(3))
            self._error(404)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _authorized(self, repo: Repo) -> tuple[bool, bool]:
        """(a token was sent, it is the one that may read)"""
        auth = self.headers.get("Authorization", "")
        return bool(auth), auth == f"Bearer {TOKEN}"

    def _repo(self, name: str, revision: str) -> Repo | None:
        hub = self.hub
        repo = hub.repos.get(name)
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        sent, ok = self._authorized(repo)
        if repo.private and not ok:
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and not ok:
            self._error(403 if sent else 401, "GatedRepo", "Access to model is restricted")
            return None
        if revision not in repo.revisions:
            self._error(404, "RevisionNotFound", "Invalid rev id")
            return None
        return repo

    def _resolve(self, name: str, revision: str, rel: str) -> None:
        hub = self.hub
        for new, r in hub.repos.items():
            if r.renamed_from == name:  # a renamed repository: a relative redirect on the hub itself
                return self._send(307, {"Location": f"/{new}/resolve/{revision}/{urllib.parse.quote(rel)}"})
        repo = self._repo(name, revision)
        if repo is None:
            return
        blob = repo.files.get(rel)
        if blob is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        pointer = hashlib.sha1(f"version https://git-lfs.github.com/spec/v1\noid sha256:{blob.sha256}".encode())
        claimed = repo.claims.get(rel, blob.sha256)
        self._send(302, {"Location": f"{hub.blob_base}/blobs/{blob.sha256}?X-Sig=local-test-signature",
                         "X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{claimed}"',
                         "X-Linked-Size": str(blob.size), "ETag": f'"{pointer.hexdigest()}"',
                         "Accept-Ranges": "bytes"})

    def _info(self, rest: str) -> bool:
        """`HfApi.model_info`: GET /api/models/{repo} or /api/models/{repo}/revision/{rev} → its commit (`sha`)."""
        m = re.match(r"^([^/]+/[^/]+)(?:/revision/([^/]+))?$", rest)
        if not m:
            return False
        repo = self._repo(m.group(1), m.group(2) or "main")
        if repo is not None:
            self._send(200, {"Content-Type": "application/json"}, json.dumps(
                {"id": m.group(1), "modelId": m.group(1), "sha": COMMIT, "private": repo.private,
                 "siblings": [{"rfilename": p} for p in sorted(repo.files)]}).encode())
        return True

    def _tree(self, rest: str, query: str) -> None:
        hub = self.hub
        if self._info(rest):
            return
        m = re.match(r"^([^/]+/[^/]+)/tree/([^/]+)$", rest)
        if not m:
            return self._error(404)
        repo = self._repo(m.group(1), m.group(2))
        if repo is None:
            return
        q = urllib.parse.parse_qs(query)
        files = dict(repo.files)
        if "listing-no-gguf" in hub.fail:
            files = {}
        entries: list[dict] = [{"type": "file", "oid": hashlib.sha1(b".gitattributes").hexdigest(), "size": 1519,
                                "path": ".gitattributes"},
                               {"type": "file", "oid": hashlib.sha1(b"README.md").hexdigest(), "size": 42,
                                "path": "README.md"}]
        folders = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
        entries += [{"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0, "path": f}
                    for f in folders]
        for rel, b in sorted(files.items()):
            sha = repo.claims.get(rel, b.sha256)
            entries.append({"type": "file", "oid": hashlib.sha1(sha.encode()).hexdigest(), "size": b.size,
                            "path": rel, "lfs": {"oid": sha, "size": b.size, "pointerSize": 134}})
        entries += self._hostile_entries()
        if self._hostile_listing(m.group(1), m.group(2), q):
            return
        start = int(q.get("cursor", ["0"])[0])
        page = entries[start:start + hub.page_size]
        headers = {"Content-Type": "application/json"}
        if start + hub.page_size < len(entries):
            nxt = f"{hub.endpoint}/api/models/{m.group(1)}/tree/{m.group(2)}?" + urllib.parse.urlencode(
                {**{k: v[0] for k, v in q.items()}, "cursor": start + hub.page_size})
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._send(200, headers, json.dumps(page).encode())

    # ------------------------------------------------------------ hostile listings and manifests (issue 45)

    def _hostile_entries(self) -> list[dict]:
        """listing:many:N (N models of one GGUF file each, no quant in their names, none served), listing:unsafe
        (paths outside the repository)."""
        fail = self.hub.fail
        many = next((int(x.split(":")[2]) for x in fail if x.startswith("listing:many:")), 0)
        out = [{"type": "file", "oid": "0" * 40, "size": 1000 + i, "path": f"m{i:05d}/M{i:05d}.gguf"}
               for i in range(many)]
        if "listing:unsafe" in fail:
            out += [{"type": "file", "oid": "1" * 40, "size": 10, "path": p}
                    for p in ("/etc/llamalab-Q4_K_M.gguf", "../../llamalab-Q4_K_M.gguf", "a/../../x-Q4_K_M.gguf")]
        return out

    def _hostile_listing(self, name: str, revision: str, q: dict) -> bool:
        """listing:not-json, listing:wrong-shape, listing:digits (a size of 5,000 digits), listing:trickle (a byte
        every 0.1 s), listing:loop (a `Link: next` to itself, answered at most 1,000 times)."""
        fail = self.hub.fail
        if "listing:not-json" in fail:
            self._send(200, {"Content-Type": "application/json"}, b"<html>not json</html>")
        elif "listing:wrong-shape" in fail:
            self._send(200, {"Content-Type": "application/json"}, b'{"files": 3}')
        elif "listing:digits" in fail:
            self._send(200, {"Content-Type": "application/json"},
                       b'[{"type": "file", "oid": "x", "path": "M-Q4_K_M.gguf", "size": ' + b"9" * 5000 + b"}]")
        elif "listing:trickle" in fail:  # a byte every 0.1 s, 300 at most
            body = b"[]" + b" " * 400
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(300):
                if self.hub.stop.wait(0.1):
                    break
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
            self.close_connection = True
        elif "listing:loop" in fail:
            self.hub.loops += 1
            nxt = f"{self.hub.endpoint}/api/models/{name}/tree/{revision}?cursor=loop"
            self._send(200, {"Content-Type": "application/json",
                             **({"Link": f'<{nxt}>; rel="next"'} if self.hub.loops < 1000 else {})}, b"[]")
        else:
            return False
        return True

    def _hostile_manifest(self) -> bool:
        """manifest-nested (200,000 arrays deep), manifest-trickle (a byte every 0.1 s, 300 at most),
        manifest-size-true (the model layer's size is `true`)."""
        fail = self.hub.fail
        if "manifest-nested" in fail:
            self._send(200, {"Content-Type": MANIFEST_V2}, b"[" * 200_000 + b"]" * 200_000)
        elif "manifest-trickle" in fail:
            body = b'{"layers": []}' + b" " * 400
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(300):
                if self.hub.stop.wait(0.1):
                    return True
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
            self.close_connection = True
        else:
            return False
        return True

    def _registry(self, path: str) -> None:
        hub = self.hub
        m = re.match(r"^/v2/([^/]+)/([^/]+)/manifests/([^/]+)$", path)
        if m and self._hostile_manifest():
            return
        if m:
            man = hub.ollama.get((m.group(1), m.group(2), m.group(3)))
            if man is None:
                return self._send(404, {"Content-Type": "application/json"},
                                  b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')
            if "manifest-no-model" in hub.fail:
                man = {**man, "layers": [x for x in man["layers"] if not x["mediaType"].endswith(".model")]}
            if "manifest-size-true" in hub.fail:
                man = {**man, "layers": [{**x, "size": True} for x in man["layers"]]}
            return self._send(200, {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"},
                              json.dumps(man).encode())
        m = re.match(r"^/v2/([^/]+)/([^/]+)/blobs/sha256:([0-9a-f]{64})$", path)
        if m and m.group(3) in hub.blobs:
            return self._send(307, {"Location": f"{hub.blob_base}/blobs/{m.group(3)}"})
        self._send(404, {"Content-Type": "application/json"}, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')

    def _blob(self, b: Blob | None, key: str) -> None:
        hub = self.hub
        if b is None:
            return self._error(404)
        for mode in list(hub.fail):
            if mode.startswith("busy:") and int(mode[5:]) > 0:
                hub.fail.discard(mode)
                if int(mode[5:]) > 1:
                    hub.fail.add(f"busy:{int(mode[5:]) - 1}")
                return self._error(503, message="Service Unavailable")
            if mode.startswith("status:"):
                return self._error(int(mode[7:]))
        etag = f'"{b.sha256}"'
        rng = self.headers.get("Range")
        m = re.match(r"^bytes=(\d+)-(\d*)$", rng or "")
        if "stall" in hub.fail and self.command == "GET":
            self.send_response(206)
            self.send_header("Content-Range", f"bytes 0-0/{b.size}")
            self.send_header("Content-Length", "1")
            self.end_headers()
            hub.stop.wait(60)  # nothing more until the test ends
            return
        if self.command == "HEAD":
            return self._head(b, etag)
        if m and "no-range" not in hub.fail:
            a = int(m.group(1))
            z = min(int(m.group(2)) if m.group(2) else b.size - 1, b.size - 1)
            if a >= b.size:
                return self._send(416, {"Content-Range": f"bytes */{b.size}"})
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{z}/{b.size}")
            self.send_header("Content-Length", str(z - a + 1))
        else:
            a, z = 0, b.size - 1
            self.send_response(200)
            self.send_header("Content-Length", str(b.size))
        self.send_header("ETag", etag)
        if "no-range" not in hub.fail:
            self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        with open(b.path, "rb") as f:
            f.seek(a)
            left = z - a + 1
            while left > 0:
                chunk = f.read(min(left, 1 << 16))
                if not chunk:
                    break
                self.wfile.write(chunk)
                hub.sent[key] = hub.sent.get(key, 0) + len(chunk)
                left -= len(chunk)

    def _head(self, b: Blob, etag: str) -> None:
        self.send_response(200)
        self.send_header("ETag", etag)
        if "no-range" not in self.hub.fail:  # a server without Range support mostly says nothing about it
            self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(b.size))
        self.end_headers()
