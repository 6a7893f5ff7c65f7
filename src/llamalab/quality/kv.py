"""What each quantized KV cache on tune's front costs in output quality, measured before anything is picked.

For every K/V pair on the verified front other than f16/f16: llama.cpp's `llama-perplexity --kl-divergence` against
the f16/f16 cache's distributions over the same text (`quality.kld`): mean KLD, its 99th percentile and the share
of positions whose most likely token is unchanged. The runs use the study's build and run on the study's devices
(`Runs`: `setup.prepare.device_setup` starts them, as for llama-server, and gives llama-perplexity their arguments:
`--rpc` for rpc-servers, the environment that selects CUDA, Vulkan or ROCm devices). Results are cached per model
file (its fingerprint), text, pair, build and backend (with its device count) under `$LLAMALAB_HOME/quality/`; the
f16/f16 base file (hundreds of MB for a 262k-token vocabulary) lives only while the pairs not yet cached are
measured.

The text is llama.cpp's own documentation (`docs/**/*.md` of the llama.cpp source the build was made from, MIT
licence, the first 200,000 characters in path order): it travels with every source llamalab builds, so nothing
is downloaded. A synthetic model's weights are random numbers, so what its KV cache "costs" in quality means
nothing: that is said once and nothing is run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import tempfile
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..core.errors import ConfigError
from ..core.write import atomic_write
from ..llamacpp.build import BuildArtifact
from ..models import standin
from ..models import synthetic as models
from ..rig.devices import DeviceSetup
from ..setup.options import RunOptions
from ..setup.prepare import Prepared, device_setup, prepare
from ..setup.progress import Progress
from ..study.spec import Study, TuneSpec
from . import kld as kldmod

BASE = "f16/f16"
CORPUS_CHARS = 200_000
CORPUS_NAME = "llama.cpp docs/**/*.md (MIT licence)"


@dataclass
class Quality:
    by_pair: dict[str, dict] = field(default_factory=dict)  # "q8_0/q8_0" → kld.Kld.as_dict() (+ "cached")
    corpus: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    measured: bool = False
    runs: dict = field(default_factory=dict)  # the build and backend measured with (`Runs`)

    def as_dict(self) -> dict:
        return {"base": BASE, "by_pair": self.by_pair, "corpus": self.corpus, "measured": self.measured,
                "runs": self.runs,
                "method": f"llama-perplexity --kl-divergence, -c {kldmod.N_CTX}, --chunks {kldmod.CHUNKS}"}


@dataclass(frozen=True)
class Runs:
    """Where the quality runs run, and what identifies it in the cache: the build's llama-perplexity and the
    environment that selects its libraries, the study's devices (`devices(log_dir)` starts them for the runs, as
    `setup.prepare.device_setup` does for llama-server; None: the devices llama-perplexity finds itself), the
    build (its llama.cpp source's key and its own: the backend and CMake options) and the backend with its device
    count."""

    binary: Path
    env: Mapping[str, str]
    build: str
    backend: str
    devices: Callable[[Path], AbstractContextManager[DeviceSetup]] | None = None

    @classmethod
    def of(cls, prep: Prepared, art: BuildArtifact) -> Runs:
        """The study's first build on the study's devices."""
        return cls(binary=art.binary("llama-perplexity"), env=art.env(), build=f"{art.source.key}/{art.key}",
                   backend=f"{prep.backend}x{prep.study.devices.count}",
                   devices=lambda log_dir: device_setup(prep, art, log_dir))

    def cache_key(self) -> str:
        """The build and the backend, hashed: a result measured with another build or on another backend is not
        this one's (a quantized cache's kernels differ between them)."""
        return hashlib.sha256(f"{self.build}|{self.backend}".encode()).hexdigest()[:10]


def cache_folder(home: Path, fingerprint: str, corpus_digest: str, runs: Runs) -> Path:
    """Where the results of one model file, text, build and backend are kept, a file per pair."""
    return home / "quality" / f"{fingerprint}-{corpus_digest}-c{kldmod.N_CTX}x{kldmod.CHUNKS}-{runs.cache_key()}"


def corpus_text(source_dir: Path) -> str | None:
    """The quality text: llama.cpp's docs/**/*.md in path order, cut at CORPUS_CHARS (None where the source has no
    docs folder)."""
    docs = source_dir / "docs"
    if not docs.is_dir():
        return None
    parts: list[str] = []
    size = 0
    for p in sorted(docs.rglob("*.md")):
        try:
            t = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        parts.append(t)
        size += len(t)
        if size >= CORPUS_CHARS:
            break
    text = "\n\n".join(parts)[:CORPUS_CHARS]
    return text if text.strip() else None


def is_synthetic(name: str | None) -> bool:
    return bool(name and str(name).startswith("llamalab synthetic"))



def for_front(prep: Prepared, art: BuildArtifact, kvs: Iterable[str], spec: TuneSpec, logs: Path, home: Path,
              progress: Progress) -> Quality:
    """KLD of every K/V pair on tune's front (`kvs`) against f16/f16, with the front's own binary, cached."""
    q = Quality()
    pairs = sorted(set(kvs) - {BASE})
    if not pairs:
        return q
    if not spec.quality:
        q.notes.append("KV cache quality was not measured ([tune] quality = false)")
        return q
    if is_synthetic(prep.model_info.name):
        q.notes.append("KV cache quality is not measured on a synthetic model: its weights are random, so its token "
                       "distributions — and what a quantized cache changes in them — mean nothing; tune a real "
                       "model to see each cache's KL divergence against f16/f16")
        return q
    if standin.is_sparse(prep.model_path):
        q.notes.append("KV cache quality is not measured on a header-only stand-in: it holds no weights (tune the "
                       "model file itself to see each cache's KL divergence against f16/f16)")
        return q
    runs = Runs.of(prep, art)
    if not runs.binary.is_file():
        q.notes.append(f"KV cache quality was not measured: there is no llama-perplexity in {art.bin_dir}")
        return q
    return for_pairs(runs, prep.model_path, prep.model_info.fingerprint,
                     Path(prep.source.path) if prep.source is not None else None, pairs, home, logs, progress, q)


def for_pairs(runs: Runs, model: Path, fingerprint: str, source_dir: Path | None, pairs: list[str], home: Path,
              logs: Path, progress: Progress, q: Quality | None = None) -> Quality:
    """KLD of each K/V pair against f16/f16 for one model file, from the cache where measured before with the same
    build on the same backend."""
    q = q or Quality()
    text = corpus_text(source_dir) if source_dir is not None else None
    if text is None:
        q.notes.append("KV cache quality was not measured: the llama.cpp source has no docs/ to use as its text")
        return q
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    q.corpus = {"name": CORPUS_NAME, "chars": len(text), "sha256_12": digest}
    q.runs = {"build": runs.build, "backend": runs.backend}
    folder = cache_folder(home, fingerprint, digest, runs)
    todo = []
    for kv in pairs:
        f = folder / f"{kv.replace('/', '-')}.json"
        try:
            q.by_pair[kv] = {**json.loads(f.read_text(encoding="utf-8")), "cached": True}
        except (OSError, ValueError):
            todo.append(kv)
    if todo:
        logs.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            dev = stack.enter_context(runs.devices(logs / "devices")) if runs.devices is not None else None
            env = {**runs.env, **(dev.env if dev is not None else {})}
            args = tuple(dev.server_args) if dev is not None else ()
            _measure(runs.binary, model, text, todo, folder, logs, (env, args), q, progress)
    q.measured = bool(q.by_pair)
    return q


def _measure(binary: Path, model: Path, text: str, pairs: list[str], folder: Path, logs: Path,
             on: tuple[dict[str, str], tuple[str, ...]], q: Quality, progress: Progress) -> None:
    """The f16/f16 base run and a run per pair, each result cached as it ends; `on`: the environment and the device
    arguments of the study's devices."""
    env, device_args = on
    with tempfile.TemporaryDirectory(prefix="llamalab-kld-") as tmp:
        corpus, base = Path(tmp) / "corpus.txt", Path(tmp) / "base.kld"
        corpus.write_text(text, encoding="utf-8")
        progress.message(f"KV cache quality: {BASE} distributions over {len(text):,} characters of {CORPUS_NAME}")
        rc, lines = kldmod.run(kldmod.base_argv(binary, model, corpus, base, device_args), logs / "kld-base.log",
                               env)
        if rc != 0 or not base.is_file():
            q.notes.append(f"KV cache quality was not measured: llama-perplexity's {BASE} run failed (exit {rc}; "
                           f"{(lines[-1] if lines else 'no output')[:200]})")
            return
        for kv in pairs:
            progress.message(f"KV cache quality: {kv} against {BASE} (llama-perplexity --kl-divergence)")
            rc, lines = kldmod.run(kldmod.pair_argv(binary, model, base, kv, device_args),
                                   logs / f"kld-{kv.replace('/', '-')}.log", env)
            got = kldmod.parse(lines, kv) if rc == 0 else None
            if got is None:
                q.notes.append(f"KV cache quality of {kv} was not measured: llama-perplexity failed (exit {rc}; "
                               f"{(lines[-1] if lines else 'no output')[:200]})")
                continue
            atomic_write(folder / f"{kv.replace('/', '-')}.json", json.dumps(got.as_dict()))
            q.by_pair[kv] = {**got.as_dict(), "cached": False}


def for_model(model: Path, kv: str, study: Study, opts: RunOptions, progress: Progress) -> Quality:
    """`llamalab quality`: each K/V pair of `kv` ("f16/q8_0,q8_0/q8_0") against f16/f16 on one model file, with the
    llama-perplexity of the study's first build on this machine (prepared once: `setup.prepare.prepare`), cached.
    A pair's spelling is checked as a study's is; a synthetic model is refused (its weights are random)."""
    pairs = [p.strip() for p in kv.split(",") if p.strip()]
    try:
        TuneSpec(kv=["f16/f16", *[p for p in pairs if p != BASE]])
    except ValidationError as e:
        raise ConfigError(f"--kv {kv}: {e.errors()[0]['msg']}",
                          tip="give pairs like f16/q8_0,q8_0/q8_0,q4_0/q4_0.") from None
    info = models.read_info(model)
    if is_synthetic(info.name):
        raise ConfigError(f"{model} is a synthetic model: its weights are random, so what a KV cache changes in its "
                          "output means nothing.", tip="measure a real model file.")
    prep = prepare(study, dataclasses.replace(opts, model=info.path), progress)
    art = prep.artifacts[study.builds[0].name]
    with tempfile.TemporaryDirectory(prefix="llamalab-quality-") as logs:
        return for_pairs(Runs.of(prep, art), info.path, info.fingerprint, Path(prep.source.path),
                         [p for p in pairs if p != BASE], opts.home, Path(logs), progress)
