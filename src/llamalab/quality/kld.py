"""What a quantized KV cache costs in output quality: llama.cpp's own `llama-perplexity --kl-divergence`.

A first run with an f16/f16 cache saves the model's token distributions over a text (`--kl-divergence-base FILE`,
with the text's tokens); each further run, with the same tokens and another K/V cache pair, compares its
distributions with those: the mean KL divergence and its 99th percentile (nats per token) and how often the most
likely next token is the same ("Same top p"). Only the second half of each chunk is scored (llama-perplexity's
rule), so `chunks × n_ctx / 2` token positions count.

The argv builders and the output reader are pure; `run` starts llama-perplexity (proc.run) and reads its log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import proc
from ..core.records import JsonObject

N_CTX = 256  # tokens per chunk
CHUNKS = 8  # chunks: 8 × 128 scored positions = 1,024 token positions (a 262k-vocabulary base file: 0.5 GB)

_MEAN = re.compile(r"Mean\s+KLD:\s*(-?[\d.]+(?:e-?\d+)?)\s*±\s*([\d.]+(?:e-?\d+)?)")
_P99 = re.compile(r"99\.0%\s+KLD:\s*(-?[\d.]+(?:e-?\d+)?)")
_TOP = re.compile(r"Same top p:\s*([\d.]+)\s*±\s*([\d.]+)\s*%")
_PPL_RATIO = re.compile(r"Mean PPL\(Q\)/PPL\(base\)\s*:\s*([\d.]+)")


@dataclass(frozen=True)
class Kld:
    """One K/V pair against the f16/f16 base."""

    kv: str
    mean: float  # mean KL divergence, nats per token
    mean_err: float
    p99: float | None  # 99th percentile of the per-token KLD
    same_top_pct: float | None  # % of positions where the most likely token is the base's
    same_top_err: float | None
    ppl_ratio: float | None  # perplexity against the base's
    positions: int  # token positions scored

    def as_dict(self) -> JsonObject:
        return asdict(self)


def base_argv(binary: Path, model: Path, corpus: Path, base: Path, device_args: Sequence[str] = ()) -> list[str]:
    """The f16/f16 run that saves the base distributions (and the corpus's tokens) to `base`."""
    return [str(binary), "-m", str(model), "-f", str(corpus), "--kl-divergence-base", str(base),
            *common_args(device_args), "-ctk", "f16", "-ctv", "f16"]


def pair_argv(binary: Path, model: Path, base: Path, kv: str, device_args: Sequence[str] = ()) -> list[str]:
    """A run with the K/V pair `kv` ("q8_0/q8_0") against the saved base."""
    k, _, v = kv.partition("/")
    return [str(binary), "-m", str(model), "--kl-divergence-base", str(base), "--kl-divergence",
            *common_args(device_args), "-ctk", k, "-ctv", v]


def common_args(device_args: Sequence[str] = ()) -> list[str]:
    """The same context, chunks and batch in every run; flash attention on (a quantized V cache needs it); every
    layer offloaded, to the devices `device_args` names (the study's: `--rpc` for rpc-servers; none given: the
    devices llama-perplexity finds itself); llama.cpp's load lines in the log (`-lv 4`, as llama-server gets: which
    devices it used, how many layers each took)."""
    return ["-c", str(N_CTX), "--chunks", str(CHUNKS), "-b", str(N_CTX), "-fa", "on", "-ngl", "999", "-lv", "4",
            *device_args]


def arm_argv(binary: Path, model: Path, base: Path, args: Sequence[str], chunks: int, corpus: Path | None = None
             ) -> list[str]:
    """A run with a configuration's own flags (`args`, as llama-perplexity takes them), the check's context, batch
    and chunks last (they win): with `corpus`, the baseline's run that saves its logits (and the text's tokens) to
    `base`; without, a run whose logits are compared with them."""
    head = ["-f", str(corpus), "--kl-divergence-base", str(base)] if corpus is not None else \
        ["--kl-divergence-base", str(base), "--kl-divergence"]
    return [str(binary), "-m", str(model), *head, *args, "-c", str(N_CTX), "--chunks", str(chunks), "-b", str(N_CTX)]


def parse(lines: Iterable[str], kv: str, chunks: int = CHUNKS) -> Kld | None:
    """The statistics llama-perplexity prints at the end of a --kl-divergence run; None where they are missing (it
    failed, or the log was cut)."""
    mean = p99 = top = ratio = None
    for line in lines:
        if len(line) > 4096:
            continue
        if (m := _MEAN.search(line)) is not None:
            mean = (float(m.group(1)), float(m.group(2)))
        elif (m := _P99.search(line)) is not None:
            p99 = float(m.group(1))
        elif (m := _TOP.search(line)) is not None:
            top = (float(m.group(1)), float(m.group(2)))
        elif (m := _PPL_RATIO.search(line)) is not None:
            ratio = float(m.group(1))
    if mean is None:
        return None
    return Kld(kv=kv, mean=mean[0], mean_err=mean[1], p99=p99, same_top_pct=top[0] if top else None,
               same_top_err=top[1] if top else None, ppl_ratio=ratio, positions=chunks * (N_CTX // 2))


def run(argv: Sequence[str], log: Path, env: dict[str, str], timeout_s: float = 1800.0) -> tuple[int, list[str]]:
    """Run llama-perplexity; its exit status and its log's lines."""
    done = proc.run(argv, log_path=log, env=env, timeout_s=timeout_s)
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    return done.returncode, lines
