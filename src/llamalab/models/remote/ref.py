"""What a `--model` argument names, and how a repository's GGUF files make models (pure).

    ~/models/m.gguf                     a local file (or only the start of one): not a reference
    hf://OWNER/REPO/PATH/FILE.gguf      one file of a Hugging Face repository (revision: OWNER/REPO@REV/PATH, or
                                        PATH@REV; a revision with a slash is written URL-encoded: refs%2Fpr%2F1)
    hf://OWNER/REPO                     every GGUF model of the repository (split files as one model)
    hf://OWNER/REPO:Q4_K_M              the repository's model of that quant (llama.cpp's `-hf` spelling)
    https://HOST/PATH/FILE.gguf         any server that answers Range requests
    ollama://NAME[:TAG]                 the ollama library (NAMESPACE/NAME:TAG for another namespace)

A split model is llama.cpp's gguf-split format: `PREFIX-00001-of-00003.gguf` … (llama.cpp's `llama_split_path`
writes `%s-%05d-of-%05d.gguf`), loaded from its first part with the others beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import httpx

from ...core.errors import ModelError
from ...core.safetext import one_line

SCHEMES = ("hf://", "https://", "http://", "ollama://")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_OLLAMA = re.compile(r"^(?:(?P<ns>[a-z0-9][a-z0-9._-]{0,79})/)?(?P<name>[a-z0-9][a-z0-9._-]{0,79})"
                     r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?$")
_REV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# Quant labels as converters and quantizers name files (llama-quantize's type names, Unsloth's UD- prefix).
_QUANT = re.compile(
    r"(?:^|[-_.])(?P<q>(?:UD-)?(?:IQ[1-4]_(?:XXS|XS|NL|S|M)|IQ[1-4]_K(?:_[SML])?|Q[2-8]_K(?:_(?:XL|[SML]))?"
    r"|Q[4-8]_[01](?:_[48]_[48])?|TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|FP16|F32))(?=$|[-_.])", re.IGNORECASE)


@dataclass(frozen=True)
class HfFile:
    repo: str  # OWNER/REPO
    path: str  # the file inside the repository
    revision: str | None = None

    def __str__(self) -> str:
        return f"hf://{self.repo}{'@' + self.revision if self.revision else ''}/{self.path}"


@dataclass(frozen=True)
class HfRepo:
    repo: str
    revision: str | None = None
    quant: str | None = None  # hf://OWNER/REPO:Q4_K_M

    def __str__(self) -> str:
        return f"hf://{self.repo}{'@' + self.revision if self.revision else ''}{':' + self.quant if self.quant else ''}"


@dataclass(frozen=True)
class Url:
    url: str

    @property
    def filename(self) -> str:
        return safe_name(urlsplit(self.url).path.rsplit("/", 1)[-1])

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True)
class Ollama:
    namespace: str
    name: str
    tag: str = "latest"

    def __str__(self) -> str:
        ns = "" if self.namespace == "library" else self.namespace + "/"
        return f"ollama://{ns}{self.name}:{self.tag}"


Ref = HfFile | HfRepo | Url | Ollama


def is_reference(text: str) -> bool:
    """Whether `--model` names a remote model (a scheme this module reads) rather than a local path."""
    return str(text).lower().startswith(SCHEMES)


MAX_REF = 4096  # characters of a reference (a URL that long is no model's)
_USERINFO = re.compile(r"(?<=//)[^/?#@]*@")


def shown_line(text: str) -> str:
    """Text that names a reference or a remote file, as llamalab shows it: one line without control sequences,
    credentials in a URL (user:password@) as ***@."""
    return _USERINFO.sub("***@", one_line(text))


def shown(text: str) -> str:
    """`shown_line`, cut to 200 characters."""
    t = shown_line(text)
    return t if len(t) <= 200 else t[:200] + "…"


def _bad(text: str, why: str, tip: str) -> ModelError:
    return ModelError(f"--model {shown(text)}: {why}.", tip=tip)


_HF_TIP = ("write hf://OWNER/REPO/FILE.gguf (one file), hf://OWNER/REPO (every GGUF in it) or hf://OWNER/REPO:Q4_K_M; "
           "a revision as hf://OWNER/REPO@REVISION/FILE.gguf.")


def parse(text: str) -> Ref:
    """A reference from `--model TEXT` (is_reference(TEXT) must hold); a ModelError says what is wrong with it."""
    text = str(text).strip()
    if len(text) > MAX_REF:
        raise _bad(text, f"{len(text):,} characters is longer than any model's address", "check the reference.")
    low = text.lower()
    if low.startswith("hf://"):
        return _parse_hf(text, text[5:])
    if low.startswith("ollama://"):
        m = _OLLAMA.match(text[9:])
        if not m:
            raise _bad(text, "not an ollama model name", "write ollama://NAME:TAG, e.g. ollama://llama3.2:3b (lower "
                       "case; NAMESPACE/NAME:TAG for a model outside the library).")
        return Ollama(namespace=m.group("ns") or "library", name=m.group("name"), tag=m.group("tag") or "latest")
    return Url(_url(text))


def _url(text: str) -> str:
    """An http(s) URL with a host that httpx can fetch (its port a number, its host a name IDNA can encode)."""
    if any(ord(c) < 33 or 0x7f <= ord(c) <= 0x9f for c in text):
        raise _bad(text, "the URL holds spaces or control characters", "quote or percent-encode the URL.")
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
        if not httpx.URL(text).host:  # the client that fetches it (its host IDNA-encoded): refused here, in words
            host = None
    except (ValueError, UnicodeError, TypeError, httpx.InvalidURL) as e:
        raise _bad(text, f"not a URL llamalab can fetch ({one_line(e)[:120]})",
                   "write https://HOST[:PORT]/PATH/FILE.gguf (PORT a number; an IPv6 host in brackets).") from None
    if parts.scheme.lower() not in ("http", "https") or not host or port == 0:
        raise _bad(text, "not a URL with a host", "write https://HOST/PATH/FILE.gguf.")
    return text


def _parse_hf(text: str, rest: str) -> Ref:
    parts = rest.split("/")
    if len(parts) < 2:
        raise _bad(text, "a Hugging Face reference needs OWNER/REPO", _HF_TIP)
    owner, repo = parts[0], parts[1]
    path = parts[2:]
    revision = quant = None
    if "@" in repo:
        repo, revision = repo.split("@", 1)
    elif path and "@" in path[-1] and not path[-1].lower().endswith(".gguf"):
        path[-1], revision = path[-1].rsplit("@", 1)
    if not path and revision is None and ":" in repo:
        repo, quant = repo.split(":", 1)
    elif not path and revision and ":" in revision:
        revision, quant = revision.split(":", 1)
    if not _NAME.match(owner) or not _NAME.match(repo) or ".." in (owner, repo):
        raise _bad(text, f"{owner}/{repo} is not a repository name", _HF_TIP)
    if revision is not None:
        revision = unquote(revision)
        if not _REV.match(revision) or ".." in revision:
            raise _bad(text, f"{revision!r} is not a revision (a branch, tag or commit)", _HF_TIP)
    if quant is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", quant):
        raise _bad(text, f"{quant!r} is not a quant name (such as Q4_K_M)", _HF_TIP)
    if not path or path == [""]:
        return HfRepo(repo=f"{owner}/{repo}", revision=revision, quant=quant)
    if any(p in ("", ".", "..") for p in path) or any(ord(c) < 32 for p in path for c in p):
        raise _bad(text, "the file path has an empty, '.' or '..' part", _HF_TIP)
    if not path[-1].lower().endswith(".gguf"):
        raise _bad(text, f"{path[-1]} is not a .gguf file", "name a .gguf file of the repository, or leave the path "
                   "out to plan every GGUF in it (hf://OWNER/REPO).")
    return HfFile(repo=f"{owner}/{repo}", path="/".join(path), revision=revision)


def safe_name(name: str, default: str = "model.gguf") -> str:
    """A file name for a stand-in: the remote one where it is a plain name, else `default` (pure)."""
    name = unquote(name)
    if not name or name in (".", "..") or "/" in name or "\\" in name or any(ord(c) < 32 for c in name) \
            or len(name) > 200:
        return default
    return name if name.lower().endswith(".gguf") else name + ".gguf"


# ---------------------------------------------------------------- a repository's files as models


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int | None = None
    sha256: str | None = None  # an LFS file's published hash


@dataclass(frozen=True)
class RepoModel:
    """One model of a repository: one GGUF file, or every part of a split one (in part order)."""

    name: str  # the file (or the split's prefix) without .gguf
    quant: str  # Q4_K_M, F16 … (from the file name; the name itself when it has none)
    files: tuple[RepoFile, ...]

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files if f.size is not None]
        return None if len(sizes) < len(self.files) else sum(sizes)

    @property
    def split(self) -> bool:
        return len(self.files) > 1 or bool(SPLIT.match(self.files[0].path.rsplit("/", 1)[-1]))


def quant_of(name: str) -> str | None:
    """The quant label in a file name (`Qwen3-8B-Q4_K_M.gguf` → `Q4_K_M`), upper-cased; None when it has none."""
    stem = name.rsplit("/", 1)[-1]
    stem = stem[:-5] if stem.lower().endswith(".gguf") else stem
    m = SPLIT.match(stem + ".gguf")
    if m:
        stem = m.group("prefix")
    found = list(_QUANT.finditer(stem))
    return found[-1].group("q").upper() if found else None


def is_projector(path: str) -> bool:
    """A vision projector (`mmproj-*.gguf`), shipped beside multimodal models: not a model to plan."""
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


@dataclass(frozen=True)
class Grouped:
    models: tuple[RepoModel, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why) of GGUF files that make no model


def group(files: list[RepoFile]) -> Grouped:
    """A repository's files → its GGUF models: single files, and split files gathered into one model (all parts
    present, numbered 1…N of one N); projectors and incomplete splits are skipped with the reason. Largest first."""
    singles: list[RepoModel] = []
    splits: dict[tuple[str, str], dict[int, RepoFile]] = {}
    counts: dict[tuple[str, str], set[int]] = {}
    skipped: list[tuple[str, str]] = []
    for f in files:
        base = f.path.rsplit("/", 1)[-1]
        if not base.lower().endswith(".gguf"):
            continue
        if is_projector(f.path):
            skipped.append((f.path, "a vision projector (mmproj), not a model"))
            continue
        m = SPLIT.match(base)
        if m:
            folder = f.path.rsplit("/", 1)[0] if "/" in f.path else ""
            key = (folder, m.group("prefix"))
            splits.setdefault(key, {})[int(m.group("no"))] = f
            counts.setdefault(key, set()).add(int(m.group("count")))
            continue
        name = base[:-5]
        singles.append(RepoModel(name=name, quant=quant_of(base) or name, files=(f,)))
    for key, parts in splits.items():
        (folder, prefix), ns = key, counts[key]
        n = max(ns)
        if len(ns) > 1 or sorted(parts) != list(range(1, n + 1)):
            have = ", ".join(str(i) for i in sorted(parts))
            for f in parts.values():
                skipped.append((f.path, f"an incomplete split model: parts {have} of {n} are listed"))
            continue
        singles.append(RepoModel(name=prefix, quant=quant_of(prefix + ".gguf") or prefix,
                                 files=tuple(parts[i] for i in range(1, n + 1))))
    singles.sort(key=lambda m: (-(m.size or 0), m.name))
    return Grouped(models=tuple(singles), skipped=tuple(sorted(skipped)))


def select(grouped: Grouped, quant: str) -> RepoModel:
    """The repository's one model of `quant` (case-insensitive; a file name's stem matches too)."""
    want = quant.upper()
    hits = [m for m in grouped.models if m.quant.upper() == want or m.name.upper() == want]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise no_such_quant(grouped, quant)
    raise ModelError(f"the repository has {len(hits)} models of {quant}: {listed([m.name for m in hits])}.",
                     tip="name the file itself: hf://OWNER/REPO/FILE.gguf.")


def listed(names: list[str], most: int = 12) -> str:
    """Names for a message: at most `most` of them, each one line and short, then how many more."""
    shown_ = [one_line(n)[:80] for n in names[:most]]
    return ", ".join(shown_) + (f" … and {len(names) - most:,} more" if len(names) > most else "")


def no_such_quant(grouped: Grouped, quant: str) -> ModelError:
    have = listed(sorted({m.quant for m in grouped.models}), 24) or "none"
    return ModelError(f"the repository has no {quant} model (its quants: {have}).",
                      tip="pick one of those, or leave :QUANT out to plan them all in one table.")


# llama.cpp's sidecar files, never a model (common/download.cpp `gguf_filename_is_model`, b11312)
_SIDECARS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")


def pick(listed_files: list[RepoFile], grouped: Grouped, tag: str) -> RepoModel:
    """The model `llama-server -hf OWNER/REPO:TAG` loads (llama.cpp b11312, common/download.cpp
    `find_best_model`): the first file of the listing, in the hub's order, whose path holds TAG followed by `.` or
    `-` (any case), that is a model (a `.gguf` name without mmproj, imatrix, mtp-, eagle3-, dflash-, dspark-) and,
    if split, its first part; then that file's model (all its parts). Where llamalab differs: llama.cpp reads one
    page of the listing (the hub's first 1,000 entries), llamalab all of it; a split model with a part missing is
    loaded by neither (llama.cpp fails on the missing part, llamalab says so first)."""
    pattern = re.compile(re.escape(tag) + r"[.-]", re.IGNORECASE)
    for f in listed_files:
        base = f.path.rsplit("/", 1)[-1]
        if not base.endswith(".gguf") or any(s in base for s in _SIDECARS) or not pattern.search(f.path):
            continue
        m = SPLIT.match(base)
        if m and int(m.group("no")) != 1:
            continue
        model = next((x for x in grouped.models if any(y.path == f.path for y in x.files)), None)
        if model is None:
            why = dict(grouped.skipped).get(f.path, "not a model llamalab can read")
            raise ModelError(f"the repository's {tag} file is {one_line(f.path)[:200]}: {why}.",
                             tip="name another file: hf://OWNER/REPO/FILE.gguf.")
        return model
    raise no_such_quant(grouped, tag)


def safe_repo_path(path: str) -> bool:
    """A listed path that stays inside the repository (and any folder it is downloaded into): relative, no empty,
    `.` or `..` part, no backslash or control character, not absurdly long."""
    parts = path.split("/")
    return (0 < len(path) <= 1024 and not path.startswith("/") and "\\" not in path
            and all(p not in ("", ".", "..") for p in parts) and not any(ord(c) < 32 or ord(c) == 127 for c in path))


def split_name(prefix: str, no: int, count: int) -> str:
    """llama.cpp's name of part `no` of `count` (llama_split_path)."""
    return f"{prefix}-{no:05d}-of-{count:05d}.gguf"
