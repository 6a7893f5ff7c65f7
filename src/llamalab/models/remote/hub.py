"""A Hugging Face hub through `huggingface_hub` (1.x and 2.x): its address, its client with timeouts and deadlines,
its errors in words, a repository's files at one commit, and where a file's bytes are.

- `endpoint()` is HF_ENDPOINT as it is now (huggingface_hub reads it once, at import), checked: an http(s) address.
- `configure(policy)` gives huggingface_hub's shared client the policy's timeouts and the deadline watch (through
  its public `set_client_factory`, keeping the request hooks of its default client, read from `get_session()`).
- `repository(ref, policy)`: the repository's commit (`HfApi.model_info(...).sha`), then its files listed at that
  commit (`HfApi.list_repo_tree`), so every file of one plan is read at the same commit; the listing bounded
  (`MAX_ENTRIES`, `MAX_LISTING_REQUESTS`), its entries checked (paths inside the repository, sizes a file can have).
- `remote(repo, paths, revision, s)`: each file's metadata (`get_hf_file_metadata`: the blob URL its resolve URL
  redirects to, its ETag and size) as `Part`s.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx

from ...core.errors import ModelError
from ...core.safetext import one_line
from .. import gguf
from . import rangeio
from . import ref as modelref
from .deadline import Watch, deadline

T = TypeVar("T")

HF_AUTH_TIP = ("a gated or private repository: accept its conditions on its Hugging Face page, then set HF_TOKEN (or "
               "`hf auth login`) to a token that may read it.")
MAX_ENTRIES = 100_000  # entries of one repository's listing (the largest GGUF repositories list a few hundred)
MAX_LISTING_REQUESTS = 200  # pages of one listing (the hub sends up to 1,000 entries a page)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
WATCH = Watch()  # huggingface_hub's shared client's connections (one client per process)


def base_url(value: str, var: str, default: str) -> str:
    """An address from the environment (HF_ENDPOINT, LLAMALAB_OLLAMA_REGISTRY) without its trailing slash, checked:
    http or https, a host, a port that is a number, no query; else a ModelError naming the variable."""
    text = value.strip().rstrip("/")
    try:
        u = httpx.URL(text)
        ok = (u.scheme in ("http", "https") and bool(u.host) and not u.query and len(text) <= 2048
              and (u.port is None or 0 < u.port < 65536))
    except (httpx.InvalidURL, ValueError, TypeError, UnicodeError):
        ok = False
    if not ok:
        raise ModelError(f"{var}={one_line(value)[:200]!r} is not an http(s) address.",
                         tip=f"set {var} to an address like {default}, or unset it.")
    return text


def endpoint() -> str:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, at import), checked."""
    from huggingface_hub import constants

    return base_url(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT, "HF_ENDPOINT", "https://huggingface.co")


def cache() -> str:
    """Hugging Face's cache as HF_HUB_CACHE / HF_HOME say now (huggingface_hub reads them once, at import)."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    return str(constants.HF_HUB_CACHE)


def offline() -> bool:
    """HF_HUB_OFFLINE as it is now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


_DEFAULT: list[tuple[types.ModuleType, list[Callable[..., Any]]]] = []  # huggingface_hub's httpx and its hooks
_CONFIGURED: list[tuple[float, float]] = []


def _default() -> tuple[types.ModuleType, list[Callable[..., Any]]]:
    """The httpx module huggingface_hub's client is built on (`httpx2` in its 2.x releases, `httpx` in 1.x) and its
    default client's request hooks, read once from the client `get_session()` gives before llamalab sets its own."""
    if not _DEFAULT:
        import huggingface_hub

        client = huggingface_hub.get_session()
        lib = sys.modules[type(client).__module__.split(".")[0]]
        _DEFAULT.append((lib, list(client.event_hooks.get("request", []))))
    return _DEFAULT[0]


def lib() -> types.ModuleType:
    return _default()[0]


def configure(policy: rangeio.Policy) -> None:
    """huggingface_hub's shared client with timeouts (its default has none, so a stalled hub would hang a listing
    forever) and the deadline watch; made once per policy."""
    import huggingface_hub

    key = (policy.connect_s, policy.read_s)
    if _CONFIGURED == [key]:
        return
    httpx_lib, hooks = _default()

    def factory() -> Any:
        return httpx_lib.Client(event_hooks={"request": [*hooks, WATCH.hook]}, follow_redirects=True,
                                timeout=httpx_lib.Timeout(policy.read_s, connect=policy.connect_s))

    huggingface_hub.set_client_factory(factory)
    _CONFIGURED[:] = [key]


def _status(e: BaseException) -> int | None:
    response = getattr(e, "response", None)
    return getattr(response, "status_code", None) if response is not None else None


@contextlib.contextmanager
def errors(what: str, ep: str) -> Iterator[None]:  # noqa: C901 - one flat table: each library error, its words
    """huggingface_hub's exceptions → ModelErrors that say what to do."""
    from huggingface_hub import errors as hferr

    httpx_lib = lib()
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
        code = _status(e) or "?"
        raise rangeio.RemoteError("auth" if code in (401, 403) else "missing",
                                  f"{what}: no such repository, or a private one ({code}).",
                                  "check OWNER/REPO; " + HF_AUTH_TIP) from None
    except hferr.OfflineModeIsEnabled:
        raise rangeio.RemoteError("network", f"{what}: HF_HUB_OFFLINE is set, so the hub is not asked.",
                                  "unset HF_HUB_OFFLINE, or pass a local file (--model ~/models/m.gguf).") from None
    except hferr.HfHubHTTPError as e:
        status = _status(e)
        if status in (401, 403):
            raise rangeio.RemoteError("auth", f"{what}: the hub refused access ({status}).", HF_AUTH_TIP) from None
        raise rangeio.RemoteError("server", f"{what}: the hub answered {status} ({one_line(e)[:200]}).",
                                  "try again later.") from None
    except (httpx_lib.UnsupportedProtocol, httpx_lib.TooManyRedirects, httpx_lib.InvalidURL) as e:
        raise rangeio.RemoteError("server", f"{what}: the hub redirected to an address llamalab cannot fetch "
                                  f"({type(e).__name__}: {one_line(e)[:200]}).", "only http:// and https:// are "
                                  "followed; check HF_ENDPOINT (it should be a Hugging Face hub).") from None
    except httpx_lib.TimeoutException as e:
        raise rangeio.RemoteError("stalled", f"{what}: {ep} stopped answering ({type(e).__name__}).",
                                  "the hub is slow or stalled: try again later.") from None
    except OSError as e:
        if isinstance(e, ModelError):
            raise
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
            raise ModelError(f"{what}: cannot write into Hugging Face's cache at {cache()}: {e.strerror}.",
                             tip="free space there, or point HF_HUB_CACHE (or HF_HOME) at a disk with room that "
                                 "this user may write.") from None
        raise _unreachable(what, ep, e) from None
    except httpx_lib.TransportError as e:
        raise _unreachable(what, ep, e) from None


def _unreachable(what: str, ep: str, e: BaseException) -> ModelError:
    return rangeio.RemoteError("network", f"{what}: cannot reach {urlsplit(ep).netloc} ({type(e).__name__}: "
                               f"{one_line(e)[:200]}); no network here?",
                               rangeio.NETWORK_TIP + " HF_ENDPOINT points at a mirror.")


def transient(e: BaseException) -> bool:
    from huggingface_hub import errors as hferr

    httpx_lib = lib()
    if isinstance(e, hferr.HfHubHTTPError):
        code = _status(e) or 0
        return code == 429 or code >= 500
    if isinstance(e, (httpx_lib.UnsupportedProtocol, httpx_lib.TooManyRedirects)):
        return False
    return isinstance(e, (httpx_lib.TimeoutException, httpx_lib.TransportError)) and \
        not isinstance(e, httpx_lib.ConnectError)


def call(what: str, ep: str, policy: rangeio.Policy, fn: Callable[[], T], *, retried: bool = True) -> T:
    """`fn()` (a huggingface_hub call) with its errors in words, retried where transient, each of its requests
    within `policy.request_s` (a hub that trickles its answer is cut, not waited for)."""
    def slow() -> ModelError:
        return rangeio.RemoteError("slow", f"{what}: the hub took more than {policy.request_s:g} s for one "
                                   "request (it sends too slowly, or stopped sending).", "try again later.")

    def once() -> T:
        with deadline(WATCH, policy.request_s, slow, each_request=True):
            return fn()

    with errors(what, ep):
        return rangeio.retry(policy, once, transient) if retried else once()


# ---------------------------------------------------------------- a repository's files at one commit


def repository(ref: modelref.HfRepo, policy: rangeio.Policy) -> tuple[str | None, list[modelref.RepoFile],
                                                                        modelref.Grouped]:
    """A repository's commit, its files as listed (in the hub's order) and its GGUF models."""
    from huggingface_hub import HfApi

    ep = endpoint()
    configure(policy)
    api = HfApi(endpoint=ep)
    info = call(str(ref), ep, policy, lambda: api.model_info(ref.repo, revision=ref.revision))
    sha = getattr(info, "sha", None)
    commit = sha if isinstance(sha, str) and _COMMIT.match(sha) else None
    files, skipped = call(str(ref), ep, policy, lambda: _listing(api, ref, commit or ref.revision),
                          retried=False)
    grouped = modelref.group(files)
    return commit, files, modelref.Grouped(models=grouped.models,
                                           skipped=tuple(sorted([*grouped.skipped, *skipped])))


def _listing(api: Any, ref: modelref.HfRepo,
             revision: str | None) -> tuple[list[modelref.RepoFile], list[tuple[str, str]]]:
    """`HfApi.list_repo_tree` (recursive) as RepoFiles, bounded: at most MAX_LISTING_REQUESTS pages and MAX_ENTRIES
    entries (a `Link: next` loop ends there), each within the deadline; an answer that is not a listing is a
    ModelError."""
    from huggingface_hub.hf_api import RepoFile

    files: list[modelref.RepoFile] = []
    skipped: list[tuple[str, str]] = []

    def endless() -> ModelError:
        return rangeio.RemoteError("damaged", f"{ref}: the hub's listing goes on past {MAX_ENTRIES:,} entries or "
                                   f"{MAX_LISTING_REQUESTS} pages.", "this is no model repository llamalab can plan; "
                                   "name one file: hf://OWNER/REPO/FILE.gguf.")

    try:
        with WATCH.limit(MAX_LISTING_REQUESTS, endless):
            for n, item in enumerate(api.list_repo_tree(ref.repo, recursive=True, revision=revision)):
                if n >= MAX_ENTRIES:
                    raise endless()
                if isinstance(item, RepoFile):
                    f, why = _entry(item)
                    if f is None:
                        skipped.append((one_line(item.path)[:200], why))
                    else:
                        files.append(f)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise rangeio.RemoteError("damaged", f"{ref}: the hub's listing is not what a Hugging Face hub sends "
                                  f"({type(e).__name__}).", "check HF_ENDPOINT (it should be a Hugging Face hub); "
                                  "try again later.") from None
    return files, skipped


def _entry(item: Any) -> tuple[modelref.RepoFile | None, str]:
    """One listed file as a RepoFile, or why it is skipped (a path outside the repository, a size no file has)."""
    path, size = item.path, item.size
    if not isinstance(path, str) or not modelref.safe_repo_path(path):
        return None, "not a path inside the repository"
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= gguf.MAX_MODEL):
        return None, "its listed size is no file's"
    sha = getattr(item.lfs, "sha256", None) if item.lfs is not None else None
    return modelref.RepoFile(path=path, size=size, sha256=sha if isinstance(sha, str) and _SHA256.match(sha)
                             else None), ""


# ---------------------------------------------------------------- where a file's bytes are


def remote_parts(repo: str, paths: list[str], revision: str | None, s_policy: rangeio.Policy,
                 listed: dict[str, modelref.RepoFile] | None = None) -> tuple[list[rangeio.Part], str | None]:
    """Each file's metadata through huggingface_hub: the blob URL its resolve URL redirects to, ETag, size; the
    commit they were read at (the first file's, where no revision pins it)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    ep = endpoint()
    configure(s_policy)
    parts = []
    commit = revision if revision and _COMMIT.match(revision) else None
    for path in paths:
        what = f"hf://{repo}/{path}"
        url = hf_hub_url(repo, path, revision=commit or revision, endpoint=ep)
        meta = call(what, ep, s_policy, functools.partial(get_hf_file_metadata, url, endpoint=ep,
                                                          timeout=s_policy.connect_s + s_policy.read_s))
        commit = commit or (meta.commit_hash if isinstance(meta.commit_hash, str)
                            and _COMMIT.match(meta.commit_hash) else None)
        try:
            location = urljoin(url, meta.location or url)
        except ValueError:
            location = ""
        if urlsplit(location).scheme not in ("http", "https"):
            raise rangeio.RemoteError("server", f"{what}: the hub sent it to an address llamalab cannot fetch.",
                                      "check HF_ENDPOINT (it should be a Hugging Face hub).")
        same = _origin(location) == _origin(ep)
        headers = tuple(sorted(build_hf_headers().items())) if same else ()
        etag = (meta.etag or "").strip('"')
        listed_sha = listed[path].sha256 if listed and path in listed else None
        size = meta.size if isinstance(meta.size, int) and 0 <= meta.size <= gguf.MAX_MODEL else None
        # the cache key: this hub, this repository and file, its content's ETag and size (another repository or a
        # mirror that claims the same ETag gets a stand-in of its own)
        parts.append(rangeio.Part(url=location, name=modelref.safe_name(path.rsplit("/", 1)[-1]), size=size,
                                  key=f"hf:{_origin(ep)}:{repo}:{path}:{etag or rangeio.redact(location)}:{size}",
                                  sha256=etag if _SHA256.match(etag) else listed_sha, headers=headers,
                                  validator=etag))
    return parts, commit


def _origin(url: str) -> tuple[str, str, int | None]:
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        return "", url, None
    return u.scheme, (u.hostname or "").lower(), port or {"http": 80, "https": 443}.get(u.scheme)
