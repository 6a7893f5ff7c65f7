"""Model references → local files: a header-only stand-in, or the whole model with `--download`.

A reference (`modelref`) is resolved here and nowhere else; what comes out is a path llama.cpp opens, and nothing
downstream knows where it came from.

- `hf://…` goes through `huggingface_hub`: `hf_hub_url` + `get_hf_file_metadata` (the resolve URL, its redirect to
  the blob host, `X-Linked-Etag`/`X-Linked-Size`/`X-Repo-Commit`), `HfApi.list_repo_tree` for a repository, its
  token (`HF_TOKEN`, else its token file) and `HF_ENDPOINT` (read when called, so a test can point it at a local
  server); `--download` is `hf_hub_download` into Hugging Face's own cache, then checked against the published
  sha256.
- `ollama://NAME:TAG`: the registry's manifest (`/v2/NAMESPACE/NAME/manifests/TAG`), then the model layer's blob
  (`/v2/NAMESPACE/NAME/blobs/sha256:…`); `LLAMALAB_OLLAMA_REGISTRY` replaces the registry's address.
- `https://…`: any server that answers Range requests.

The header is read with `rangeio` (Range requests, the hostile reader's bounds); the stand-in is cached under
`$LLAMALAB_HOME/remote/KEY/`, KEY from the files' ETag or digest, so a second plan fetches nothing.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import httpx

from ...core.errors import ModelError
from ...core.paths import locked
from ...core.write import atomic_write
from .. import gguf, standin
from . import rangeio
from . import ref as modelref
from .ref import HfFile, HfRepo, Ollama, Url

if TYPE_CHECKING:
    import httpx2

ENV_OLLAMA = "LLAMALAB_OLLAMA_REGISTRY"
OLLAMA_REGISTRY = "https://registry.ollama.ai"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MODEL_LAYER = "application/vnd.ollama.image.model"
MAX_MANIFEST = 1 << 20
HF_AUTH_TIP = ("a gated or private repository: accept its conditions on its Hugging Face page, then set HF_TOKEN (or "
               "`hf auth login`) to a token that may read it.")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Part:
    """One remote file: where its bytes are and what identifies its content."""

    url: str  # the bytes (the blob URL a hub redirected to)
    name: str  # the stand-in's file name (a split part keeps llama.cpp's part name)
    size: int | None
    key: str  # content identity: an ETag, a digest, or the URL with its ETag
    sha256: str | None = None  # the published hash, where there is one
    headers: tuple[tuple[str, str], ...] = ()  # credentials, only for the hub's own host


@dataclass(frozen=True)
class Remote:
    ref: str
    parts: tuple[Part, ...]
    auth_tip: str
    hf_repo: str | None = None  # for --download through hf_hub_download
    hf_paths: tuple[str, ...] = ()
    hf_commit: str | None = None

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.parts if p.size is not None]
        return sum(sizes) if len(sizes) == len(self.parts) else None


@dataclass(frozen=True)
class Resolved:
    path: Path  # what llama.cpp opens (a split model's first part)
    ref: str
    standin: bool  # header only
    size: int  # bytes of the whole model, all parts
    fetched: int  # bytes received now (0: from the cache)
    requests: int
    cached: bool
    parts: int = 1

    @property
    def note(self) -> str:
        parts = f" in {self.parts} parts" if self.parts > 1 else ""
        if not self.standin:
            return f"{self.ref}: the whole model ({mib(self.size)}{parts}) is {self.path}"
        if self.cached:
            return f"{self.ref}: header-only stand-in from the cache, nothing fetched ({self.path})"
        share = f" ({100 * self.fetched / self.size:.2f}% of {mib(self.size)}{parts})" if self.size else ""
        return (f"{self.ref}: read its header with {self.requests} HTTP request(s), {mib(self.fetched)} "
                f"fetched{share}; header-only stand-in {self.path}")


def mib(n: int | None) -> str:
    return "? MiB" if n is None else f"{n / 2**20:,.1f} MiB"


@dataclass
class Session:
    """What a resolution shares: the llamalab cache, an httpx client (its transport is the test seam), the policy."""

    home: Path
    http: httpx.Client
    policy: rangeio.Policy
    log: Callable[[str], None] = lambda s: None
    on_download: Callable[[str, int, int], None] | None = None

    @classmethod
    @contextlib.contextmanager
    def open(cls, home: Path, *, transport: httpx.BaseTransport | None = None, policy: rangeio.Policy | None = None,
             log: Callable[[str], None] = lambda s: None,
             on_download: Callable[[str, int, int], None] | None = None) -> Iterator[Session]:
        policy = policy or rangeio.Policy()
        with rangeio.client(transport, policy) as http:
            yield cls(home=Path(home), http=http, policy=policy, log=log, on_download=on_download)


# ---------------------------------------------------------------- entry points


def resolve(text: str, home: Path, *, weights: bool = False, transport: httpx.BaseTransport | None = None,
            policy: rangeio.Policy | None = None, log: Callable[[str], None] = lambda s: None,
            on_download: Callable[[str, int, int], None] | None = None) -> Resolved:
    """One model: its header-only stand-in, or (weights=True) the whole model downloaded and checked."""
    ref = modelref.parse(text)
    with Session.open(home, transport=transport, policy=policy, log=log, on_download=on_download) as s:
        if isinstance(ref, HfRepo) and ref.quant is None:
            raise ModelError(f"{ref} names a whole repository; this command takes one model.",
                             tip=f"pick a quant ({ref}:Q4_K_M) or a file (hf://{ref.repo}/FILE.gguf); "
                                 f"`llamalab plan --model {ref}` plans every quant in one table.")
        remote = locate(ref, s)
        return download(remote, s) if weights else standin_of(remote, s)


@dataclass(frozen=True)
class RepoModels:
    ref: str
    commit: str | None
    models: tuple[tuple[modelref.RepoModel, Resolved], ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why)


def resolve_repo(text: str, home: Path, *, transport: httpx.BaseTransport | None = None,
                 policy: rangeio.Policy | None = None, log: Callable[[str], None] = lambda s: None) -> RepoModels:
    """Every GGUF model of a Hugging Face repository as header-only stand-ins (split parts assembled)."""
    ref = modelref.parse(text)
    if not isinstance(ref, HfRepo):
        raise ModelError(f"{text} is not a Hugging Face repository.", tip="write hf://OWNER/REPO.")
    with Session.open(home, transport=transport, policy=policy, log=log) as s:
        commit, grouped = repository(ref, s.policy)
        if not grouped.models:
            raise ModelError(f"{ref} lists no GGUF model" + (f" (only {len(grouped.skipped)} file(s) that make "
                             "none: " + "; ".join(f"{p}: {w}" for p, w in grouped.skipped[:3]) + ")"
                             if grouped.skipped else "") + ".",
                             tip="llama.cpp loads GGUF files: look for the repository's -GGUF sibling (most model "
                                 "families publish one), or convert the weights with convert_hf_to_gguf.py.")
        out = []
        for m in grouped.models:
            remote = _hf_remote(ref.repo, [f.path for f in m.files], commit or ref.revision, s,
                                listed={f.path: f for f in m.files})
            res = standin_of(remote, s)
            s.log(res.note)
            out.append((m, res))
        return RepoModels(ref=str(ref), commit=commit, models=tuple(out), skipped=grouped.skipped)


def locate(ref: modelref.Ref, s: Session) -> Remote:
    """Where a reference's bytes are, from the hub's or registry's metadata (nothing of the file is read)."""
    if isinstance(ref, HfFile):
        paths = _split_siblings(ref.path)
        return _hf_remote(ref.repo, paths, ref.revision, s)
    if isinstance(ref, HfRepo):
        commit, grouped = repository(ref, s.policy)
        m = modelref.select(grouped, ref.quant or "")
        return _hf_remote(ref.repo, [f.path for f in m.files], commit or ref.revision, s,
                          listed={f.path: f for f in m.files})
    if isinstance(ref, Ollama):
        return _ollama(ref, s)
    return _url(ref, s)


def _split_siblings(path: str) -> list[str]:
    """A split model's part named → every part (llama.cpp loads them together); any other file → itself."""
    folder, _, base = path.rpartition("/")
    m = modelref.SPLIT.match(base)
    if not m:
        return [path]
    n = int(m.group("count"))
    if not 1 <= n <= 256:
        raise ModelError(f"{path} claims to be one of {n} parts.", tip="check the file name.")
    return [(folder + "/" if folder else "") + modelref.split_name(m.group("prefix"), i, n) for i in range(1, n + 1)]


# ---------------------------------------------------------------- Hugging Face


def hf_endpoint() -> str:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hf_cache() -> str:
    """Hugging Face's cache as HF_HUB_CACHE / HF_HOME say now (huggingface_hub reads them once, at import)."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    return constants.HF_HUB_CACHE


_HF_CONFIGURED: list[tuple[float, float]] = []


def _hf_session(policy: rangeio.Policy) -> None:
    """huggingface_hub's shared client with timeouts (its default has none, so a stalled hub would hang a listing
    forever); made once per policy."""
    import huggingface_hub
    from huggingface_hub.utils import _http as hfhttp

    key = (policy.connect_s, policy.read_s)
    if _HF_CONFIGURED == [key]:
        return
    lib = _hf_httpx()
    hook = getattr(hfhttp, "hf_request_event_hook", None)

    def factory() -> httpx2.Client:
        client: httpx2.Client = lib.Client(event_hooks={"request": [hook]} if hook else {}, follow_redirects=True,
                                           timeout=lib.Timeout(policy.read_s, connect=policy.connect_s))
        return client

    huggingface_hub.set_client_factory(factory)
    _HF_CONFIGURED[:] = [key]


def _hf_httpx() -> types.ModuleType:
    """The httpx module huggingface_hub's client is built on: `httpx2` in its 2.x releases, `httpx` before."""
    from huggingface_hub.utils import _http as hfhttp

    lib = vars(hfhttp).get("httpx2") or vars(hfhttp).get("httpx")
    assert isinstance(lib, types.ModuleType), "huggingface_hub without an httpx client"
    return lib


@contextlib.contextmanager
def _hf_errors(what: str, endpoint: str) -> Iterator[None]:
    """huggingface_hub's exceptions → ModelErrors that say what to do."""
    from huggingface_hub import errors as hferr

    lib = _hf_httpx()
    try:
        yield
    except hferr.GatedRepoError:
        raise rangeio.RemoteError("auth", f"{what}: the repository is gated (the hub answered 401/403).",
                                  HF_AUTH_TIP) from None
    except hferr.RevisionNotFoundError:
        raise rangeio.RemoteError("missing", f"{what}: the repository has no such revision (404).",
                                  "check the branch, tag or commit after @ (a slash in it is written %2F).") from None
    except hferr.RemoteEntryNotFoundError:
        raise rangeio.RemoteError("missing", f"{what}: the repository has no such file (404).",
                                  "check the path; `llamalab plan --model hf://OWNER/REPO` lists the repository's "
                                  "GGUF models.") from None
    except hferr.RepositoryNotFoundError as e:
        code = e.response.status_code if getattr(e, "response", None) is not None else "?"
        raise rangeio.RemoteError("auth" if code in (401, 403) else "missing",
                                  f"{what}: no such repository, or a private one ({code}).",
                                  "check OWNER/REPO; " + HF_AUTH_TIP) from None
    except hferr.OfflineModeIsEnabled:
        raise rangeio.RemoteError("network", f"{what}: HF_HUB_OFFLINE is set, so the hub is not asked.",
                                  "unset HF_HUB_OFFLINE, or pass a local file (--model ~/models/m.gguf).") from None
    except hferr.HfHubHTTPError as e:
        status = e.response.status_code if getattr(e, "response", None) is not None else None
        if status in (401, 403):
            raise rangeio.RemoteError("auth", f"{what}: the hub refused access ({status}).", HF_AUTH_TIP) from None
        raise rangeio.RemoteError("server", f"{what}: the hub answered {status} ({str(e).splitlines()[0][:200]}).",
                                  "try again later.") from None
    except lib.TimeoutException as e:
        raise rangeio.RemoteError("stalled", f"{what}: {endpoint} stopped answering ({type(e).__name__}).",
                                  "the hub is slow or stalled: try again later.") from None
    except (lib.TransportError, OSError) as e:
        if isinstance(e, ModelError):
            raise
        raise rangeio.RemoteError("network", f"{what}: cannot reach {urlsplit(endpoint).netloc} ({type(e).__name__}: "
                                  f"{e}); no "
                                  "network here?", rangeio.NETWORK_TIP + " HF_ENDPOINT points at a mirror.") from None


def _hf_transient(e: BaseException) -> bool:
    from huggingface_hub import errors as hferr

    lib = _hf_httpx()
    if isinstance(e, hferr.HfHubHTTPError):
        code = e.response.status_code if getattr(e, "response", None) is not None else 0
        return code == 429 or code >= 500
    return isinstance(e, (lib.TimeoutException, lib.TransportError)) and not isinstance(e, lib.ConnectError)


def repository(ref: HfRepo, policy: rangeio.Policy | None = None) -> tuple[str | None, modelref.Grouped]:
    """A repository's GGUF models, from `HfApi.list_repo_tree` (recursive; sizes and LFS hashes)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    ep = hf_endpoint()
    _hf_session(policy or rangeio.Policy())
    files = []
    with _hf_errors(str(ref), ep):
        api = HfApi(endpoint=ep)
        for item in api.list_repo_tree(ref.repo, recursive=True, revision=ref.revision):
            if isinstance(item, RepoFile):
                sha = item.lfs.sha256 if item.lfs is not None else None
                files.append(modelref.RepoFile(path=item.path, size=item.size, sha256=sha))
    return ref.revision, modelref.group(files)


def _hf_remote(repo: str, paths: list[str], revision: str | None, s: Session,
               listed: dict[str, modelref.RepoFile] | None = None) -> Remote:
    """Each file's metadata through huggingface_hub: the blob URL its resolve URL redirects to, ETag, size."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    ep = hf_endpoint()
    _hf_session(s.policy)
    parts = []
    commit = None
    for path in paths:
        what = f"hf://{repo}/{path}"
        url = hf_hub_url(repo, path, revision=revision or commit, endpoint=ep)
        with _hf_errors(what, ep):
            meta = rangeio.retry(s.policy, functools.partial(
                get_hf_file_metadata, url, endpoint=ep, timeout=s.policy.connect_s + s.policy.read_s), _hf_transient)
        commit = commit or meta.commit_hash
        location = urljoin(url, meta.location or url)
        same = _origin(location) == _origin(ep)
        headers = tuple(sorted(build_hf_headers().items())) if same else ()
        etag = (meta.etag or "").strip('"')
        listed_sha = listed[path].sha256 if listed and path in listed else None
        sha = etag if _SHA256.match(etag) else listed_sha
        parts.append(Part(url=location, name=modelref.safe_name(path.rsplit("/", 1)[-1]), size=meta.size,
                          key=f"hf:{etag or location}:{meta.size}", sha256=sha, headers=headers))
    return Remote(ref=f"hf://{repo}{'@' + revision if revision else ''}/{paths[0]}", parts=tuple(parts),
                  auth_tip=HF_AUTH_TIP, hf_repo=repo, hf_paths=tuple(paths), hf_commit=commit or revision)


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    return u.scheme, (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(u.scheme)


# ---------------------------------------------------------------- ollama and plain URLs


def ollama_registry() -> str:
    return (os.environ.get(ENV_OLLAMA) or OLLAMA_REGISTRY).rstrip("/")


def _ollama(ref: Ollama, s: Session) -> Remote:
    """The registry's manifest of NAME:TAG, and its model layer's blob (a GGUF file, named by its sha256)."""
    base = ollama_registry()
    url = f"{base}/v2/{ref.namespace}/{ref.name}/manifests/{ref.tag}"
    what = str(ref)
    tip = ("the registry wants credentials: llamalab reads public models of the ollama library only; pull a private "
           "one with `ollama pull` and pass its blob file (~/.ollama/models/blobs/sha256-…).")
    fetcher = rangeio.Fetcher(url, s.http, s.policy, what=what, auth_tip=tip)

    def get() -> bytes:
        fetcher.requests += 1
        with s.http.stream("GET", url, headers={"Accept": MANIFEST_V2}) as r:
            if r.status_code == 404:
                raise rangeio.RemoteError("missing", f"{what}: the registry has no such model or tag (404).",
                                          "check the name and tag on ollama.com/library (e.g. ollama://llama3.2:3b).")
            if r.status_code == 429 or r.status_code >= 500:
                raise rangeio.RemoteError("server-busy", f"{what}: the registry answered {r.status_code}.",
                                          "try again later.")
            if r.status_code >= 400:
                raise fetcher.status_error(r)
            body = bytearray()
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > MAX_MANIFEST:
                    raise rangeio.RemoteError("damaged", f"{what}: the manifest is larger than "
                                              f"{MAX_MANIFEST >> 20} MiB.", "this is not an ollama registry.")
            return bytes(body)

    try:
        body = rangeio.retry(s.policy, get, fetcher.transient)
    except (httpx.HTTPError, rangeio.RemoteError) as e:
        raise fetcher.network_error(e) from None
    try:
        doc = json.loads(body)
        layers = doc.get("layers") if isinstance(doc, dict) else None
        if not isinstance(layers, list):
            raise ValueError("no layers")
    except (ValueError, UnicodeDecodeError):
        raise rangeio.RemoteError("damaged", f"{what}: the registry's manifest is not a v2 image manifest.",
                                  f"check {ENV_OLLAMA} (it should be an ollama registry's address).") from None
    model = [x for x in layers if isinstance(x, dict) and x.get("mediaType") == MODEL_LAYER]
    if not model:
        kinds = ", ".join(sorted({str(x.get("mediaType")) for x in layers if isinstance(x, dict)})) or "none"
        raise rangeio.RemoteError("damaged", f"{what}: the manifest has no model layer ({MODEL_LAYER}); its layers: "
                                  f"{kinds}.", "this tag is not a GGUF model (an adapter or a template only?); "
                                  "pick another tag.")
    layer = model[0]
    digest, size = str(layer.get("digest", "")), layer.get("size")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest) or not isinstance(size, int) or size <= 0:
        raise rangeio.RemoteError("damaged", f"{what}: the model layer has no valid digest and size.",
                                  "the registry's manifest is damaged.")
    blob = f"{base}/v2/{ref.namespace}/{ref.name}/blobs/{digest}"
    return Remote(ref=what, auth_tip=tip, parts=(Part(url=blob, name=modelref.safe_name(f"{ref.name}-{ref.tag}"),
                                                      size=size, key=digest, sha256=digest[7:]),))


def _url(ref: Url, s: Session) -> Remote:
    """A file on any web server: HEAD for its size and ETag (the first Range read says them where HEAD cannot)."""
    paths = _split_siblings(urlsplit(ref.url).path)
    parts = []
    for p in paths:
        url = ref.url if len(paths) == 1 else urljoin(ref.url, p.rsplit("/", 1)[-1])
        h = rangeio.Fetcher(url, s.http, s.policy, what=url).head()  # (the first Range read says if it serves them)
        key = f"url:{url}|{h.etag or ''}|{h.size}|{h.last_modified or ''}"
        parts.append(Part(url=url, name=modelref.Url(url).filename, size=h.size, key=key))
    return Remote(ref=ref.url, parts=tuple(parts), auth_tip="the server wants credentials; llamalab sends none to "
                  "plain URLs (download the file and pass its path).")


# ---------------------------------------------------------------- stand-ins and downloads


def _key(remote: Remote) -> str:
    return hashlib.sha256("\n".join(p.key for p in remote.parts).encode()).hexdigest()[:20]


def standin_of(remote: Remote, s: Session) -> Resolved:
    """The header-only stand-in of every part (cached by content identity), read by Range requests."""
    key = _key(remote)
    folder = s.home / "remote" / key
    record = folder / "source.json"
    with locked(s.home / "remote" / f".{key}.lock"):
        if record.is_file() and all((folder / p.name).is_file() for p in remote.parts):
            try:
                doc = json.loads(record.read_text())
                return Resolved(path=folder / remote.parts[0].name, ref=remote.ref, standin=True,
                                size=int(doc["size"]), fetched=0, requests=0, cached=True, parts=len(remote.parts))
            except (ValueError, KeyError, OSError):
                pass  # a damaged record: read the headers again
        fetched = requests = 0
        total = 0
        n = len(remote.parts)
        for i, p in enumerate(remote.parts):
            f = rangeio.Fetcher(p.url, s.http, s.policy, what=remote.ref if n == 1 else f"{remote.ref} part {i + 1}",
                                headers=dict(p.headers), auth_tip=remote.auth_tip)
            rh = rangeio.header(f, p.size)
            _check_part(rh.header, i, n, remote.ref)
            standin.write_head(rh.head, rh.size, folder / p.name)
            fetched += rh.fetched
            requests += rh.requests
            total += rh.size
        atomic_write(record, json.dumps({"ref": remote.ref, "parts": [{"url": p.url, "name": p.name, "key": p.key}
                                                                      for p in remote.parts],
                                         "size": total, "fetched": fetched}, indent=2))
    return Resolved(path=folder / remote.parts[0].name, ref=remote.ref, standin=True, size=total, fetched=fetched,
                    requests=requests, cached=False, parts=n)


def _check_part(hdr: gguf.Header, i: int, n: int, what: str) -> None:
    """Part i of n says it is (gguf-split's split.no / split.count); a whole file says it is not a part."""
    count = hdr.kv.get("split.count")
    count = count if isinstance(count, int) and not isinstance(count, bool) else 1
    no = hdr.kv.get("split.no", 0)
    if count != n or (n > 1 and no != i):
        raise ModelError(f"{what}: the file's header says it is part {no + 1 if isinstance(no, int) else '?'} of "
                         f"{count}, but its name makes it part {i + 1} of {n}.",
                         tip="name a split model by its first part, as llama-gguf-split writes them "
                             "(NAME-00001-of-00003.gguf).")


def download(remote: Remote, s: Session) -> Resolved:
    """The whole model: through hf_hub_download into Hugging Face's cache for hf://, else into
    $LLAMALAB_HOME/models/remote/KEY/ (resumable); checked against the published sha256 where there is one."""
    if remote.hf_repo:
        from huggingface_hub import hf_hub_download

        paths = []
        ep = hf_endpoint()
        for rel, p in zip(remote.hf_paths, remote.parts, strict=True):
            with _hf_errors(f"hf://{remote.hf_repo}/{rel}", ep):
                local = Path(hf_hub_download(remote.hf_repo, rel, revision=remote.hf_commit, endpoint=ep,
                                             cache_dir=hf_cache()))
            _verify(local, p, s, remote.ref)
            paths.append(local)
        return Resolved(path=paths[0], ref=remote.ref, standin=False, size=sum(x.stat().st_size for x in paths),
                        fetched=0, requests=0, cached=False, parts=len(paths))
    folder = s.home / "models" / "remote" / _key(remote)
    paths = []
    for i, p in enumerate(remote.parts):
        dest = folder / p.name
        f = rangeio.Fetcher(p.url, s.http, s.policy, what=remote.ref, headers=dict(p.headers),
                            auth_tip=remote.auth_tip)
        size = p.size if p.size is not None else rangeio.header(f).size
        with locked(folder / f".{p.name}.lock"):
            if not (dest.is_file() and dest.stat().st_size == size):
                label = f"download {remote.ref}" + (f" part {i + 1}" if len(remote.parts) > 1 else "")
                s.log(f"{label}: {mib(size)} into {dest} (resumable: a later run continues where this stops)")
                cb = functools.partial(s.on_download, label) if s.on_download else None
                rangeio.download(f, dest, size, sha256=p.sha256, progress=cb)
        paths.append(dest)
    if not any(p.sha256 for p in remote.parts):
        s.log(f"{remote.ref}: the server publishes no hash; only the size was checked")
    return Resolved(path=paths[0], ref=remote.ref, standin=False, size=sum(x.stat().st_size for x in paths),
                    fetched=0, requests=0, cached=False, parts=len(paths))


def _verify(path: Path, part: Part, s: Session, what: str) -> None:
    """A downloaded file against its published sha256, remembered by size and mtime (a 20 GB hash is once)."""
    if not part.sha256:
        s.log(f"{what}: no published sha256 for {path.name}; only its size was checked")
        return
    st = path.stat()
    mark = s.home / "remote" / "verified" / part.sha256
    stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    if mark.is_file() and mark.read_text() == stamp:
        return
    s.log(f"{what}: checking {path.name} ({mib(st.st_size)}) against its published sha256")
    digest = rangeio.sha256_of(path)
    if digest != part.sha256:
        raise ModelError(f"{what}: {path} has sha256 {digest}, but the hub publishes {part.sha256}.",
                         tip="delete it (and its .incomplete file) from the Hugging Face cache and download it "
                             "again.")
    atomic_write(mark, stamp)
