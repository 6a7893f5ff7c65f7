"""Every configuration's logits against its baseline's: llama.cpp's `llama-perplexity --kl-divergence`, run from
the configuration's own build with its own flags and devices, against the logits the baseline (the study's first
build, same setting) saved over the same text (`--kl-divergence-base`).

The text is the one the KV cache quality check uses (quality/kv.py: llama.cpp's own docs, from the source the
baseline was built from); `[outputs] chunks` chunks of 256 tokens, the second half of each scored. The baseline is
compared with its own saved logits too (its A/A: llama-perplexity evaluates in batches, so it should print KLD
0.000000). llama-perplexity evaluates batches and generates no token, so it does not exercise generation-only paths
(graph reuse): run/references.py compares generated tokens for those.

A configuration's flags are its llama-server arguments (the study's, the build's, the setting's, the devices', the
budget emulation's), less what llama-perplexity does not take, each said with why (`DROPPED`); the context, batch
and chunks are the check's own. An ik_llama.cpp build runs its own llama-perplexity against the baseline's saved
logits (its `--kl-divergence` reads llama.cpp b11312's base file: checked), with `--log-disable` (no ./llama.log):
the engines' numerics differ, and the KLD says by how much.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import proc
from ..llamacpp import argv as argvmod
from ..llamacpp import engines
from ..llamacpp.build import BuildArtifact
from ..llamacpp.server import known_flags, unknown_flags
from ..setup.prepare import Prepared, device_setup, emulate_budgets, server_args
from ..setup.progress import Progress
from ..store.db import Store
from ..study.spec import Config
from . import kld as kldmod
from .kv import CORPUS_NAME, corpus_text

# llama-server's flags a perplexity run does without, and why
DROPPED: dict[str, str] = {
    "-np": "slots are llama-server's: llama-perplexity evaluates one sequence per chunk",
    "-kvu": "slots are llama-server's (a unified KV cache of one sequence is the same)",
    "-cram": "llama-server's prompt cache in host memory",
    "--metrics": "llama-server's /metrics",
    "--slot-save-path": "llama-server's slot files",
    "--host": "llama-server's address",
    "--port": "llama-server's port",
    "-c": "the check evaluates chunks of 256 tokens",
    "-b": "the check evaluates chunks of 256 tokens",
    "-lv": "the check's log verbosity",
}
WITH_VALUE = {"-np", "-cram", "--slot-save-path", "--host", "--port", "-c", "-b", "-lv"}
SPELLINGS = {"--parallel": "-np", "--kv-unified": "-kvu", "-no-kvu": "-kvu", "--no-kv-unified": "-kvu",
             "--cache-ram": "-cram", "--ctx-size": "-c", "--batch-size": "-b", "--verbosity": "-lv",
             "--log-verbosity": "-lv"}


def perplexity_args(args: Sequence[str], known: set[str]) -> tuple[list[str], list[str]]:
    """A configuration's llama-server arguments as llama-perplexity takes them, and each flag left out with why
    (pure). `known`: the flags llama-perplexity's --help lists (empty: not known, nothing more left out)."""
    dropped: list[str] = []
    for a in args:
        name = SPELLINGS.get(argvmod.name_of(a), argvmod.name_of(a))
        if name in DROPPED and f"{a}: {DROPPED[name]}" not in dropped:
            dropped.append(f"{a}: {DROPPED[name]}")
    with_value = WITH_VALUE | {k for k, v in SPELLINGS.items() if v in WITH_VALUE}
    bare = set(DROPPED) - WITH_VALUE | {k for k, v in SPELLINGS.items() if v not in WITH_VALUE}
    kept = argvmod.without(args, with_value=with_value, bare=bare)
    if known:
        for a in unknown_flags(kept, known):
            dropped.append(f"{a}: this llama-perplexity does not take it")
            kept = argvmod.without(kept, bare={a})
    ub = argvmod.value(kept, "-ub", "--ubatch-size")
    if ub is not None and ub.isdigit() and int(ub) > kldmod.N_CTX:
        dropped.append(f"-ub {ub}: taken, but a 256-token chunk is one micro-batch of at most 256")
    return kept, dropped


def check(prep: Prepared, store: Store, run_id: str, logs: Path, progress: Progress) -> None:
    """The logits of every configuration that ran, per setting, against the baseline's (stored in
    `output_logits`); the settings whose baseline did not run, and what was checked before (a resumed run), are
    left as they are."""
    study = prep.study
    if not study.outputs.logits:
        return
    text = corpus_text(Path(prep.source.path)) if prep.source is not None else None
    baseline = study.builds[0].name
    ok = {(c["build"], c["setting"]) for c in store.configs(run_id) if c["status"] == "ok"}
    done = {(r["build"], r["setting"]) for r in store.output_logits(run_id)}
    for st in study.settings:
        arms = [b.name for b in study.builds if (b.name, st.name) in ok and (b.name, st.name) not in done]
        if not arms or (baseline, st.name) not in ok:
            continue
        if text is None:
            for b in arms:
                store.save_output_logits(run_id, b, st.name, baseline, {
                    "error": "not compared: the llama.cpp source has no docs/ to use as the text"})
            continue
        _setting(prep, store, run_id, st.name, arms, text, logs, progress)


def _setting(prep: Prepared, store: Store, run_id: str, setting: str, arms: list[str], text: str, logs: Path,
             progress: Progress) -> None:
    study = prep.study
    baseline = study.builds[0].name
    chunks = study.outputs.chunks
    with tempfile.TemporaryDirectory(prefix="llamalab-logits-") as tmp:
        corpus, base = Path(tmp) / "corpus.txt", Path(tmp) / "base.kld"
        corpus.write_text(text, encoding="utf-8")
        progress.message(f"outputs: {baseline} × {setting}'s logits over {CORPUS_NAME} (llama-perplexity)")
        made = _run(prep, baseline, setting, base, chunks, logs, corpus)
        if made.get("error"):
            progress.warn(f"outputs: no logits of {setting} are compared: {baseline}'s run failed: {made['error']}")
            for b in arms:
                store.save_output_logits(run_id, b, setting, baseline,
                                         {**made, "error": f"not compared: the baseline's run failed: {made['error']}"})
            return
        for b in arms:  # the baseline too: its A/A against its own saved logits
            progress.message(f"outputs: {b} × {setting}'s logits against {baseline}'s (llama-perplexity)")
            got = _run(prep, b, setting, base, chunks, logs)
            if got.get("error"):  # said as it happens, run once more (its own log), and the first failure kept
                progress.message(f"outputs: {b} × {setting}'s logits could not be compared ({got['error']}); "
                                 "running the comparison once more")
                again = _run(prep, b, setting, base, chunks, logs, again=True)
                got = {**again, "first_try": got["error"]}
                if again.get("error"):  # stored with the configuration and said in its verdict
                    progress.warn(f"outputs: {b} × {setting}'s logits are not compared: {again['error']}")
            store.save_output_logits(run_id, b, setting, baseline, got)


def _run(prep: Prepared, build: str, setting: str, base: Path, chunks: int, logs: Path,
         corpus: Path | None = None, *, again: bool = False) -> dict[str, Any]:
    """One llama-perplexity run of a configuration on its own devices: the baseline's (`corpus`: saves `base`), or
    an arm's against `base` (`again`: a second try, logged apart); what `output_logits` stores (the statistics, the
    argv, what was left out, the seconds, or the error)."""
    study = prep.study
    art: BuildArtifact = prep.artifacts[build]
    cfg = Config(build=next(b for b in study.builds if b.name == build),
                 setting=next(s for s in study.settings if s.name == setting))
    binary = art.binary("llama-perplexity")
    if not binary.is_file():
        return {"error": f"not compared: there is no llama-perplexity in {art.bin_dir}"}
    t0 = time.monotonic()
    name = f"logits-{build}-{setting}{'-base' if corpus else ''}{'-again' if again else ''}".replace("/", "_")
    folder = logs / name
    folder.mkdir(parents=True, exist_ok=True)
    with device_setup(prep, art, folder) as dev:
        env = {**art.env(), **dev.env}
        args, _ = emulate_budgets(study, art, dev, env, server_args(study, cfg, dev, art.engine))
        args += [a for a in engines.log_args(engines.get(art.engine)) if a == "--log-disable"]
        rc_help, help_text = proc.capture([str(binary), "--help"], timeout_s=30, env=env)
        readable = rc_help == 0 or art.engine != engines.LLAMA_CPP  # ik_llama.cpp's --help exits 1
        kept, dropped = perplexity_args(args, known_flags(help_text, art.engine) if readable else set())
        cmd = kldmod.arm_argv(binary, prep.model_path, base, kept, chunks, corpus)
        rc, lines = kldmod.run(cmd, folder / "llama-perplexity.log", env)
    out: dict[str, Any] = {"argv": cmd[1:], "dropped": dropped, "chunks": chunks,
                           "seconds": round(time.monotonic() - t0, 2)}
    if corpus is not None:
        return out if rc == 0 and base.is_file() else {
            **out, "error": f"llama-perplexity's run failed (exit {rc}; {(lines[-1] if lines else 'no output')[:200]})"}
    got = kldmod.parse(lines, setting, chunks) if rc == 0 else None
    if got is None:
        # seen with exit 0 too: its log stopping after a chunk's line, no statistics, no error line (llama.cpp
        # b11312, -sm tensor on rpc-servers, once in a few runs; a second run printed them)
        how = "ended without its statistics" if rc == 0 else "failed"
        return {**out, "error": f"llama-perplexity's comparison {how} (exit {rc}; "
                                f"{(lines[-1] if lines else 'no output')[:200]})"}
    return {**out, **got.as_dict()}
