"""Model references → local files: a header-only stand-in, or the whole model with `--download`.

A reference (`modelref`) is resolved here and nowhere else; what comes out is a path llama.cpp opens, and nothing
downstream knows where it came from.

- `hf://…` goes through `huggingface_hub` (`hub`): the repository's commit and listing, `get_hf_file_metadata`
  (the resolve URL, its redirect to the blob host, `X-Linked-Etag`/`X-Linked-Size`/`X-Repo-Commit`), its token
  (`HF_TOKEN`, else its token file) and `HF_ENDPOINT` (read when called, so a test can point it at a local
  server); `hf://OWNER/REPO:QUANT` is the file llama.cpp's `-hf OWNER/REPO:QUANT` loads (`ref.pick`);
  `--download` is `hf_hub_download` into Hugging Face's own cache, then checked against the published sha256.
- `ollama://NAME:TAG`: the registry's manifest (`/v2/NAMESPACE/NAME/manifests/TAG`), then the model layer's blob
  (`/v2/NAMESPACE/NAME/blobs/sha256:…`); `LLAMALAB_OLLAMA_REGISTRY` replaces the registry's address.
- `https://…`: any server that answers Range requests (HEAD for the size where it answers HEAD, else the first
  Range answer's Content-Range; a split model's other parts keep the first's query string, a signed URL's token).

The header is read with `rangeio` (Range requests, the hostile reader's bounds); the stand-in is cached under
`$LLAMALAB_HOME/remote/KEY/`, KEY from where the file comes from (the hub and repository, the registry, the URL)
and what identifies its content (ETag, digest, Last-Modified), so a second plan fetches nothing and a file claimed
by another source never shares it; a URL whose server says nothing that identifies its content is read again
each time. `source.json` beside it names the sources without credentials or query strings (mode 0600), and an
index by reference (`remote/refs/`) lets a cached hf:// stand-in be used with HF_HUB_OFFLINE set.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from ...core.errors import ModelError, OutputError
from ...core.paths import locked
from ...core.write import atomic_write
from .. import gguf, standin
from . import hub, rangeio
from . import ref as modelref
from .deadline import deadline
from .rangeio import Part
from .ref import HfFile, HfRepo, Ollama, Url

ENV_OLLAMA = "LLAMALAB_OLLAMA_REGISTRY"
OLLAMA_REGISTRY = "https://registry.ollama.ai"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MODEL_LAYER = "application/vnd.ollama.image.model"
MAX_MANIFEST = 1 << 20
MAX_MODELS = 64  # models of one repository table (each a header read and three dry runs); --max-models for more
HF_AUTH_TIP = hub.HF_AUTH_TIP
CACHE_HOW = "into the stand-in cache ($LLAMALAB_HOME/remote)"
POLICY = rangeio.Policy()  # every resolution's timeouts and bounds unless one is given (a test sets short deadlines)


@dataclass(frozen=True)
class Remote:
    ref: str  # as shown: without credentials or query string
    parts: tuple[Part, ...]
    auth_tip: str
    hf_repo: str | None = None  # for --download through hf_hub_download
    hf_paths: tuple[str, ...] = ()
    hf_commit: str | None = None
    origin: str = ""  # where the files come from, for the offline index (str of the parsed reference)

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
        """What was done, for the terminal (one line, no control sequence: names come from servers)."""
        return modelref.shown_line(self._note())

    def _note(self) -> str:
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
        policy = policy or POLICY
        with rangeio.client(transport, policy) as http:
            yield cls(home=Path(home), http=http, policy=policy, log=log, on_download=on_download)


# ---------------------------------------------------------------- entry points


def resolve(text: str, home: Path, *, weights: bool = False, transport: httpx.BaseTransport | None = None,
            policy: rangeio.Policy | None = None, log: Callable[[str], None] = lambda s: None,
            on_download: Callable[[str, int, int], None] | None = None, split_ok: bool = True) -> Resolved:
    """One model: its header-only stand-in, or (weights=True) the whole model downloaded and checked. `split_ok`
    False refuses a split model before any of its bytes are read (`stub` writes one file)."""
    ref = modelref.parse(text)
    if isinstance(ref, HfRepo) and ref.quant is None:
        raise ModelError(f"{ref} names a whole repository; this command takes one model.",
                         tip=f"pick a quant ({ref}:Q4_K_M) or a file (hf://{ref.repo}/FILE.gguf); "
                             f"`llamalab plan --model {ref}` plans every quant in one table.")
    if isinstance(ref, (HfFile, HfRepo)) and hub.offline() and not weights:
        return cached_offline(ref, Path(home))
    with Session.open(home, transport=transport, policy=policy, log=log, on_download=on_download) as s:
        remote = locate(ref, s)
        if len(remote.parts) > 1 and not split_ok:
            raise ModelError(f"{remote.ref} is a split model of {len(remote.parts)} parts; a stand-in is one file.",
                             tip="plan it directly (`llamalab plan --model …` reads every part's header), or merge "
                                 "it with llama-gguf-split --merge and stub the merged file.")
        return download(remote, s) if weights else standin_of(remote, s)


@dataclass(frozen=True)
class RepoModels:
    ref: str
    commit: str | None
    models: tuple[tuple[modelref.RepoModel, Resolved], ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why)
    failed: tuple[tuple[modelref.RepoModel, str], ...] = ()  # models whose header could not be read, and why


# errors that say the same of every model of a repository: they end its table (the others give a row an error)
ABORTING = ("network", "auth", "slow", "stalled")


def resolve_repo(text: str, home: Path, *, transport: httpx.BaseTransport | None = None,
                 policy: rangeio.Policy | None = None, log: Callable[[str], None] = lambda s: None,
                 max_models: int = MAX_MODELS) -> RepoModels:
    """Every GGUF model of a Hugging Face repository as header-only stand-ins (split parts assembled), all read at
    the repository's one commit; at most `max_models` (more is refused before any header is read)."""
    ref = modelref.parse(text)
    if not isinstance(ref, HfRepo):
        raise ModelError(f"{modelref.shown(text)} is not a Hugging Face repository.", tip="write hf://OWNER/REPO.")
    with Session.open(home, transport=transport, policy=policy, log=log) as s:
        commit, _, grouped = hub.repository(ref, s.policy)
        _check_count(ref, grouped, max_models)
        out, failed = [], []
        for m in grouped.models:
            try:
                remote = _hf_remote(ref.repo, [f.path for f in m.files], commit or ref.revision, s,
                                    listed={f.path: f for f in m.files})
                res = standin_of(remote, s)
            except ModelError as e:
                if isinstance(e, rangeio.RemoteError) and e.kind in ABORTING:
                    raise
                failed.append((m, modelref.shown_line(e.message)))
                s.log(f"{m.name}: {modelref.shown_line(e.message)}")
                continue
            s.log(res.note)
            out.append((m, res))
        if not out:
            raise ModelError(f"no model of {ref} could be read: " + "; ".join(w for _, w in failed[:3]),
                             tip="the repository's files are damaged or not GGUF models; try another repository.")
        return RepoModels(ref=str(ref), commit=commit, models=tuple(out), skipped=grouped.skipped,
                          failed=tuple(failed))


def _check_count(ref: HfRepo, grouped: modelref.Grouped, max_models: int) -> None:
    if not grouped.models:
        raise ModelError(f"{ref} lists no GGUF model" + (f" (only {len(grouped.skipped)} file(s) that make "
                         "none: " + "; ".join(f"{modelref.shown(p)}: {w}" for p, w in grouped.skipped[:3]) + ")"
                         if grouped.skipped else "") + ".",
                         tip="llama.cpp loads GGUF files: look for the repository's -GGUF sibling (most model "
                             "families publish one), or convert the weights with convert_hf_to_gguf.py.")
    if len(grouped.models) > max_models:
        raise ModelError(f"{ref} holds {len(grouped.models):,} GGUF models; a repository table plans at most "
                         f"{max_models} (each is a header read and three dry runs).",
                         tip=f"pass --max-models {len(grouped.models)} to plan them all, or one of them: "
                             f"{ref}:Q4_K_M.")


def locate(ref: modelref.Ref, s: Session) -> Remote:
    """Where a reference's bytes are, from the hub's or registry's metadata (nothing of the file is read)."""
    if isinstance(ref, HfFile):
        paths = _split_siblings(ref.path)
        return _hf_remote(ref.repo, paths, ref.revision, s, origin=str(ref))
    if isinstance(ref, HfRepo):
        commit, listed, grouped = hub.repository(ref, s.policy)
        m = modelref.pick(listed, grouped, ref.quant or "")
        _note_ambiguity(grouped, ref, m, s)
        return _hf_remote(ref.repo, [f.path for f in m.files], commit or ref.revision, s,
                          listed={f.path: f for f in m.files}, origin=str(ref))
    if isinstance(ref, Ollama):
        return _ollama(ref, s)
    return _url(ref, s)


def _note_ambiguity(grouped: modelref.Grouped, ref: HfRepo, m: modelref.RepoModel, s: Session) -> None:
    """Where the repository has several models of the quant, say which one was taken (llama.cpp's choice)."""
    try:
        modelref.select(grouped, ref.quant or "")
    except ModelError as e:
        s.log(modelref.shown_line(f"{ref}: {e.message} Taken: {m.name}, the first listed, as llama.cpp's -hf "
                                  "takes it."))


def _split_siblings(path: str) -> list[str]:
    """A split model's part named → every part (llama.cpp loads them together); any other file → itself."""
    folder, _, base = path.rpartition("/")
    m = modelref.SPLIT.match(base)
    if not m:
        return [path]
    n = int(m.group("count"))
    if not 1 <= n <= 256:
        raise ModelError(f"{modelref.shown(path)} claims to be one of {n} parts.", tip="check the file name.")
    return [(folder + "/" if folder else "") + modelref.split_name(m.group("prefix"), i, n) for i in range(1, n + 1)]


def _hf_remote(repo: str, paths: list[str], revision: str | None, s: Session,
               listed: dict[str, modelref.RepoFile] | None = None, origin: str = "") -> Remote:
    parts, commit = hub.remote_parts(repo, paths, revision, s.policy, listed)
    return Remote(ref=f"hf://{repo}{'@' + revision if revision else ''}/{paths[0]}", parts=tuple(parts),
                  auth_tip=HF_AUTH_TIP, hf_repo=repo, hf_paths=tuple(paths), hf_commit=commit or revision,
                  origin=origin)


def hf_endpoint() -> str:
    return hub.endpoint()


def hf_cache() -> str:
    return hub.cache()


# ---------------------------------------------------------------- ollama and plain URLs


def ollama_registry() -> str:
    return hub.base_url(os.environ.get(ENV_OLLAMA) or OLLAMA_REGISTRY, ENV_OLLAMA, OLLAMA_REGISTRY)


_TIP_OLLAMA = ("the registry wants credentials: llamalab reads public models of the ollama library only; pull a "
               "private one with `ollama pull` and pass its blob file (~/.ollama/models/blobs/sha256-…).")


def _ollama(ref: Ollama, s: Session) -> Remote:
    """The registry's manifest of NAME:TAG, and its model layer's blob (a GGUF file, named by its sha256)."""
    base = ollama_registry()
    what = str(ref)
    layers = _manifest(ref, base, s)
    model = [x for x in layers if isinstance(x, dict) and x.get("mediaType") == MODEL_LAYER]
    if not model:
        kinds = modelref.listed(sorted({modelref.shown_line(str(x.get("mediaType")))
                                        for x in layers if isinstance(x, dict)})) or "none"
        raise rangeio.RemoteError("damaged", f"{what}: the manifest has no model layer ({MODEL_LAYER}); its layers: "
                                  f"{kinds}.", "this tag is not a GGUF model (an adapter or a template only?); "
                                  "pick another tag.")
    layer = model[0]
    digest, size = layer.get("digest"), layer.get("size")
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest) or \
            not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= gguf.MAX_MODEL:
        raise rangeio.RemoteError("damaged", f"{what}: the model layer has no valid digest and size.",
                                  "the registry's manifest is damaged.")
    blob = f"{base}/v2/{ref.namespace}/{ref.name}/blobs/{digest}"
    return Remote(ref=what, auth_tip=_TIP_OLLAMA, parts=(Part(
        url=blob, name=modelref.safe_name(f"{ref.name}-{ref.tag}"), size=size,
        key=f"ollama:{rangeio.redact(base)}:{digest}", sha256=digest[7:], validator=digest),))


def _manifest(ref: Ollama, base: str, s: Session) -> list[object]:
    """The layers of the registry's manifest of NAME:TAG (read within the deadline, at most MAX_MANIFEST bytes)."""
    url = f"{base}/v2/{ref.namespace}/{ref.name}/manifests/{ref.tag}"
    what = str(ref)
    fetcher = rangeio.Fetcher(url, s.http, s.policy, what=what, auth_tip=_TIP_OLLAMA)

    def get() -> bytes:
        fetcher.requests += 1
        with deadline(rangeio.watch_of(s.http), s.policy.request_s, fetcher.slow) as expired, \
                s.http.stream("GET", url, headers={"Accept": MANIFEST_V2}) as r:
            if r.status_code == 404:
                raise rangeio.RemoteError("missing", f"{what}: the registry has no such model or tag (404).",
                                          "check the name and tag on ollama.com/library (e.g. ollama://llama3.2:3b).")
            if r.status_code == 429 or r.status_code >= 500:
                raise rangeio.RemoteError("server-busy", f"{what}: the registry answered {r.status_code}.",
                                          "try again later.")
            if r.status_code >= 400:
                raise fetcher.status_error(r)
            body = bytearray()
            for chunk in r.iter_raw():
                body += chunk
                if len(body) > MAX_MANIFEST:
                    raise rangeio.RemoteError("damaged", f"{what}: the manifest is larger than "
                                              f"{MAX_MANIFEST >> 20} MiB.", "this is not an ollama registry.")
                if expired.is_set():
                    raise fetcher.slow()
            return bytes(body)

    try:
        body = rangeio.retry(s.policy, get, fetcher.transient)
    except (httpx.HTTPError, httpx.InvalidURL, rangeio.RemoteError) as e:
        raise fetcher.network_error(e) from None
    try:
        doc = json.loads(body)
        layers = doc.get("layers") if isinstance(doc, dict) else None
        if not isinstance(layers, list):
            raise ValueError("no layers")
        return layers
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise rangeio.RemoteError("damaged", f"{what}: the registry's manifest is not a v2 image manifest.",
                                  f"check {ENV_OLLAMA} (it should be an ollama registry's address).") from None


def _sibling(url: str, path: str) -> str:
    """The URL of another file of the same folder: `url` with its path replaced, its query string (a signed URL's
    token) and everything else kept."""
    u = urlsplit(url)
    return urlunsplit(u._replace(path=path))


def _url(ref: Url, s: Session) -> Remote:
    """A file on any web server: HEAD for its size and validators; where HEAD is refused (a URL signed for GET
    alone), the first Range answer says them."""
    paths = _split_siblings(urlsplit(ref.url).path)
    parts = []
    for p in paths:
        url = ref.url if len(paths) == 1 else _sibling(ref.url, p)
        f = rangeio.Fetcher(url, s.http, s.policy, what=rangeio.redact(url))
        h = f.head()
        if h.size is None:  # no HEAD: one small Range read says the size, ETag and Last-Modified
            try:
                f.read(0, s.policy.first_read)
                h = rangeio.Head(f.size, f.etag, f.last_modified)
            except rangeio.RemoteError as e:
                if e.kind != "no-range":  # no Range either: a header cannot be read (said then); --download can
                    raise
        validator = "|".join(x for x in (h.etag, h.last_modified) if x)
        key = f"url:{rangeio.redact(url)}|{validator}|{h.size}" if validator else ""
        parts.append(Part(url=url, name=modelref.Url(url).filename, size=h.size, key=key,
                          validator=f"{validator}|{h.size}" if validator else ""))
    return Remote(ref=rangeio.redact(ref.url), parts=tuple(parts), auth_tip="the server wants credentials; llamalab "
                  "sends none to plain URLs (download the file and pass its path).")


# ---------------------------------------------------------------- stand-ins and downloads


def _key(remote: Remote) -> str:
    """The stand-in's folder: from every part's key (its source and content identity); a remote with a part that
    nothing identifies gets a folder of its URLs, never reused as a cache."""
    keys = [p.key or f"uncached:{rangeio.redact(p.url)}" for p in remote.parts]
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:20]


def _index(home: Path, origin: str) -> Path:
    return home / "remote" / "refs" / hashlib.sha256(origin.encode()).hexdigest()[:20]


def standin_of(remote: Remote, s: Session) -> Resolved:
    """The header-only stand-in of every part (cached by source and content identity), read by Range requests."""
    key = _key(remote)
    folder = s.home / "remote" / key
    record = folder / "source.json"
    cacheable = all(p.key for p in remote.parts)
    with locked(s.home / "remote" / f".{key}.lock"):
        hit = _cached(remote, folder) if cacheable else None
        if hit is not None:
            return hit
        fetched = requests = total = 0
        n = len(remote.parts)
        for i, p in enumerate(remote.parts):
            f = rangeio.Fetcher(p.url, s.http, s.policy, what=remote.ref if n == 1 else f"{remote.ref} part {i + 1}",
                                headers=dict(p.headers), auth_tip=remote.auth_tip)
            rh = rangeio.header(f, p.size)
            _check_part(rh.header, i, n, remote.ref)
            _cache_write(functools.partial(standin.write_head, rh.head, rh.size, folder / p.name, how=CACHE_HOW))
            fetched += rh.fetched
            requests += rh.requests
            total += rh.size
        doc = {"ref": remote.ref, "parts": [{"url": rangeio.redact(p.url), "name": p.name,
                                             "key": rangeio.redact_key(p.key)} for p in remote.parts],
               "size": total, "fetched": fetched, "cached": cacheable}
        _cache_write(lambda: _private(record, json.dumps(doc, indent=2)))
        if remote.origin and cacheable:
            _cache_write(lambda: atomic_write(_index(s.home, remote.origin), key, how=CACHE_HOW))
    return Resolved(path=folder / remote.parts[0].name, ref=remote.ref, standin=True, size=total, fetched=fetched,
                    requests=requests, cached=False, parts=n)


def _cached(remote: Remote, folder: Path) -> Resolved | None:
    """The stand-in a cache folder holds (None where it holds none, or a damaged record)."""
    record = folder / "source.json"
    if not (record.is_file() and all((folder / p.name).is_file() for p in remote.parts)):
        return None
    try:
        doc = json.loads(record.read_text())
        return Resolved(path=folder / remote.parts[0].name, ref=remote.ref, standin=True, size=int(doc["size"]),
                        fetched=0, requests=0, cached=True, parts=len(remote.parts))
    except (ValueError, KeyError, TypeError, OSError):
        return None  # a damaged record: read the headers again


def cached_offline(ref: HfFile | HfRepo, home: Path) -> Resolved:
    """With HF_HUB_OFFLINE set: the stand-in an earlier resolution of the same reference cached, asking nobody."""
    try:
        key = _index(home, str(ref)).read_text().strip()
        doc = json.loads((home / "remote" / key / "source.json").read_text())
        names = [str(p["name"]) for p in doc["parts"]]
        paths = [home / "remote" / key / n for n in names]
        if key and names and all(p.is_file() and p.parent.name == key for p in paths):
            return Resolved(path=paths[0], ref=str(ref), standin=True, size=int(doc["size"]), fetched=0, requests=0,
                            cached=True, parts=len(paths))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise rangeio.RemoteError("network", f"{ref}: HF_HUB_OFFLINE is set, so the hub is not asked, and no stand-in "
                              "of it is cached.", "unset HF_HUB_OFFLINE once to read its header (a few MiB), or "
                              "pass a local file (--model ~/models/m.gguf).")


def _private(path: Path, text: str) -> None:
    """A file only this user may read (source.json names where a model came from)."""
    atomic_write(path, text, how=CACHE_HOW)
    os.chmod(path, 0o600)


def _cache_write(write: Callable[[], object]) -> None:
    """A write into the stand-in cache; a refusal names the cache, not -o."""
    tip = "free space there, or point LLAMALAB_HOME at a disk with room that this user may write."
    try:
        write()
    except OutputError as e:
        raise ModelError(e.message, tip=tip) from None
    except OSError as e:
        raise ModelError(f"cannot write the stand-in cache at {e.filename or '$LLAMALAB_HOME'}: {e.strerror}.",
                         tip=tip) from None


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
    $LLAMALAB_HOME/models/remote/KEY/ (resumable where the server identifies the file); checked against the
    published sha256 where there is one."""
    if remote.hf_repo:
        return _hf_download(remote, s)
    folder = s.home / "models" / "remote" / _key(remote)
    paths = []
    for i, p in enumerate(remote.parts):
        dest = folder / p.name
        f = rangeio.Fetcher(p.url, s.http, s.policy, what=remote.ref, headers=dict(p.headers),
                            auth_tip=remote.auth_tip)
        with locked(folder / f".{p.name}.lock"):
            done = dest.is_file() and p.size is not None and dest.stat().st_size == p.size
            if done and not p.validator:
                s.log(f"{remote.ref}: the server says nothing that tells versions of the file apart; the earlier "
                      f"download of the same size is used (delete {dest} to fetch it again)")
            if not done:
                label = f"download {remote.ref}" + (f" part {i + 1}" if len(remote.parts) > 1 else "")
                s.log(f"{label}: {mib(p.size)} into {dest}" + (" (resumable: a later run continues where this "
                                                                  "stops)" if p.validator else ""))
                cb = functools.partial(s.on_download, label) if s.on_download else None
                rangeio.download(f, dest, p.size, sha256=p.sha256, validator=p.validator, progress=cb)
        paths.append(dest)
    if not any(p.sha256 for p in remote.parts):
        s.log(f"{remote.ref}: the server publishes no hash; only the size was checked")
    return Resolved(path=paths[0], ref=remote.ref, standin=False, size=sum(x.stat().st_size for x in paths),
                    fetched=0, requests=0, cached=False, parts=len(paths))


def _hf_download(remote: Remote, s: Session) -> Resolved:
    from huggingface_hub import hf_hub_download

    assert remote.hf_repo is not None  # download() sends only hub models here
    paths = []
    ep = hub.endpoint()
    for rel, p in zip(remote.hf_paths, remote.parts, strict=True):
        with hub.errors(f"hf://{remote.hf_repo}/{rel}", ep):
            local = Path(hf_hub_download(remote.hf_repo, rel, revision=remote.hf_commit, endpoint=ep,
                                         cache_dir=hub.cache()))
        _verify(local, p, s, remote.ref)
        paths.append(local)
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
    _cache_write(lambda: atomic_write(mark, stamp, how=CACHE_HOW))
