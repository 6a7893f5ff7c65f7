"""Memory ledger: llama.cpp log lines in, a `Ledger` out. Pure: no I/O, never raises on any input.

Reads the lines llama-cpp-facts.md §2 lists, in every format llama.cpp printed them since early 2024:
- model weights: `llm_load_tensors: CUDA0 buffer size = X MiB` (2024, no word "model"), then
  `load_tensors: CUDA0 model buffer size = X MiB`;
- KV / recurrent state: `llama_kv_cache_init:` → `init:` → `llama_kv_cache_unified:` → `llama_kv_cache:`
  `CUDA0 KV buffer size`, `llama_memory_recurrent: CUDA0 RS buffer size`;
- KV summary: `KV self size = X MiB, K (f16): …, V (f16): …` (2024), then
  `size = X MiB (N cells, L layers, a/b seqs), K (…): …, V (…): …`, and the `kv_size = N, … n_layer = L` line;
- pipeline parallelism: `pipeline parallelism enabled (n_copies=4)` (old), `pipeline parallelism enabled` plus
  `sched copies = N` (new), `compute buffer allocation failed, retrying without pipeline parallelism`;
- graph: `graph nodes = N`, `graph splits = S [(with bs=…), T (with bs=1)]`, `graph splits (measure): S`, then
  `graph[ (pp bs=…, tg bs=…)]: nodes = N[ / M], splits = S[ / T]`.
Also: context sizes (`n_ctx`, `n_ctx_per_seq`, `n_ctx_seq`), offloaded layers, `--fit` lines, memory-breakdown tables
(projected during fit, final at exit: kept apart), compute-buffer allocation failures and the retry without
pipeline parallelism (with the allocation that failed before it), early-2024 `input buffer` lines (their own
figure), and `-sm tensor`'s Meta device: `creating a Meta device … - device i: NAME` and `Meta() … buffer size`
lines, attributed to those devices (split_meta). Lines may carry timestamps, level letters, `[pid]`, CRLF, ANSI
colours, JSONL wrapping (`--log-jsonl`), journald prefixes, or be ollama's `time=… level=… msg="…"` records (their
message read as a line; ollama's engine's `model weights` / `kv cache` / `compute graph` summaries as buffers), or
be interleaved with unrelated output; pastes may be truncated.

How a log maps to one ledger:
- A ledger describes the *last* model load in the log. A model buffer line after a context has started begins a
  new load (a restarted server, a second run pasted below the first), unless a draft model is being loaded
  (`loading draft model`, `MTP draft context`): draft buffers are real memory and are added, but the scalars
  (n_ctx, copies, splits …) stay those of the main context.
- A context-level line (n_ctx, KV/RS/output buffers, KV summary) after a finished or failed context begins a new
  context that replaces the previous one (a new context cut off before any buffer line leaves the one before).
  Compute buffers of one reserve pass are summed per name (a real load prints a shared buffer type once, so a
  repeated name is another buffer; during a --fit dry run the larger is kept); a later pass (a re-reserve)
  replaces the earlier one. Model buffers with the same name are summed (split GGUF files, mmap chunks).
- Device buffers (CUDA0, Vulkan1, ROCm0, Metal, MTL0, RPC0[host:port] …) are kept apart from host buffers (CPU,
  CPU_Mapped, CPU_*, AMX, *_Host), keyed by the printed name. Multimodal projector (clip) compute buffers and LoRA
  adapters are recorded apart, not in the per-device ledger.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("model", "kv", "rs", "compute", "output", "input")
MIB = 1024 * 1024


@dataclass
class Buffers:
    """MiB per kind of buffer on one device or host buffer type; None where the log printed none."""

    model_mib: float | None = None
    kv_mib: float | None = None
    rs_mib: float | None = None
    compute_mib: float | None = None
    output_mib: float | None = None
    input_mib: float | None = None  # early 2024: graph inputs in a buffer of their own (`CUDA_Host input buffer`)

    def add(self, kind: str, mib: float) -> None:
        attr = f"{kind}_mib"
        setattr(self, attr, round((getattr(self, attr) or 0.0) + mib, 2))

    def total(self) -> float:
        return round(sum(getattr(self, f"{k}_mib") or 0.0 for k in KINDS), 2)


@dataclass
class KvSummary:
    """One `size = …` (or `KV self size = …`) line: a KV cache (or, with kind "rs", a recurrent-state cache)."""

    size_mib: float | None = None
    cells: int | None = None  # per stream, as printed
    layers: int | None = None
    seqs: str | None = None  # as printed: "4/1", "1"
    n_stream: int = 1
    k_type: str | None = None
    k_mib: float | None = None
    v_type: str | None = None
    v_mib: float | None = None
    kind: str = "kv"  # "kv" or "rs"
    swa: bool | None = None  # True for the sliding-window cache of an iSWA model
    buffers: dict[str, float] = field(default_factory=dict)  # the buffer lines printed for this cache

    @property
    def total_cells(self) -> int | None:
        return self.cells * max(1, self.n_stream) if self.cells else None


@dataclass
class BreakdownRow:
    name: str
    total: float | None = None
    free: float | None = None
    self_: float | None = None
    model: float | None = None
    context: float | None = None
    compute: float | None = None
    unaccounted: float | None = None


@dataclass
class Ledger:
    devices: dict[str, Buffers] = field(default_factory=dict)
    host: dict[str, Buffers] = field(default_factory=dict)
    pipeline_parallel: bool | None = None
    n_copies: int | None = None  # as printed: `sched copies = N` where printed, else `(n_copies=N)`
    sched_copies: int | None = None  # "sched copies = N": the effective number
    pp_enabled_copies: int | None = None  # the N of "pipeline parallelism enabled (n_copies=N)"
    pp_enabled_line: bool = False
    pp_retry: bool = False
    compute_alloc_failed: bool = False
    # {"buffer": name, "mib": size} per failed allocation
    alloc_failures: list[dict[str, Any]] = field(default_factory=list)
    context_failed: bool = False
    graph_nodes: int | None = None  # prompt-processing graph where pp and tg differ
    graph_splits: int | None = None
    graph_nodes_tg: int | None = None
    graph_splits_tg: int | None = None
    n_ctx: int | None = None
    n_ctx_seq: int | None = None  # n_ctx_seq or n_ctx_per_seq
    n_seq_max: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: bool | None = None
    kv_unified: bool | None = None
    n_embd: int | None = None
    n_layer: int | None = None
    n_ctx_train: int | None = None
    layers_offloaded: int | None = None
    layers_total: int | None = None
    kv: KvSummary | None = None  # the largest KV cache (the one that scales with context)
    kv_caches: list[KvSummary] = field(default_factory=list)
    rs_caches: list[KvSummary] = field(default_factory=list)
    fit_ctx_from: int | None = None
    fit_ctx_to: int | None = None
    fit_status: str | None = None  # "ok" | "failed"
    fit_args: str | None = None  # what llama-fit-params printed
    breakdown_projected: list[BreakdownRow] = field(default_factory=list)  # first table of the fit (initial params)
    breakdown_projected_tables: list[list[BreakdownRow]] = field(default_factory=list)
    breakdown_final: list[BreakdownRow] = field(default_factory=list)
    device_memory: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (total MiB, free MiB)
    device_desc: dict[str, str] = field(default_factory=dict)  # name → description (an rpc device's endpoint)
    draft: bool = False  # a draft model / draft context was loaded and is included in the buffers
    mmproj_compute: dict[str, float] = field(default_factory=dict)  # clip (multimodal projector) compute buffers
    lora: dict[str, float] = field(default_factory=dict)
    build: str | None = None
    # -sm tensor: the printed Meta() buffers and how they were attributed (see split_meta)
    meta: dict[str, Any] | None = None
    pp_dropped_reason: str | None = None  # the allocation that failed before llama.cpp retried without the pipeline
    wrapper: str | None = None  # "ollama" where the lines came from ollama's records or its server log
    failure: str | None = None  # failure_reason() of the same lines
    n_loads: int = 0  # model loads seen; the ledger describes the last
    errors: list[str] = field(default_factory=list)

    def compute_host_mib(self) -> float | None:
        vals = [b.compute_mib for b in self.host.values() if b.compute_mib is not None]
        return round(sum(vals), 2) if vals else None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: every field, with `devices`/`host` as {name: {model_mib, kv_mib, compute_mib, output_mib,
        rs_mib, input_mib, total_mib}} (MiB as printed, 2 decimals; null where the log had no such line). Under
        `-sm tensor` `devices` holds the Meta() buffers attributed to the devices they span; `meta` keeps what
        llama.cpp printed and how it was attributed."""

        def bufs(d: dict[str, Buffers]) -> dict[str, Any]:
            return {k: {**{a: getattr(v, a) for a in ("model_mib", "kv_mib", "compute_mib", "output_mib", "rs_mib",
                                                      "input_mib")},
                        "total_mib": v.total()} for k, v in d.items()}

        out = asdict(self)
        out["devices"] = bufs(self.devices)
        out["host"] = bufs(self.host)
        out["device_memory"] = {k: list(v) for k, v in self.device_memory.items()}
        return out


# ---------------------------------------------------------------- line cleanup

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|\^\[\[[0-9;]*m|\[[0-9]{1,2}(?:;[0-9]{1,2})*m")
_PREFIX = re.compile(r"\s*(?:\[\d+\]\s+)?\d+\.\d{2}\.\d{3}\.\d{3}\s+[DITWE]\s+")
# journald / syslog: `Jan 30 09:12:13 host ollama[5307]: `, `9月 02 14:46:54 host ollama[1756203]: `, `mai 17 …`, or
# journalctl -o short-iso's `2025-09-02T14:46:54+0800 host ollama[1756203]: `
_SYSLOG = re.compile(r"(?:[^\s\d]{1,12}|\d{1,2}月)\s{1,2}\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?"
                     r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?")
_SYSLOG_TAIL = re.compile(r"\s+[^\s\[\]]{1,255}\s+(?P<proc>[^\s\[\]:]{1,128})\[\d{1,10}\]:\s?")
# No line the ledger reads is longer than a few hundred characters; a longer one (a model name full of blanks,
# a paste with no newlines) keeps its first and last MAX_LINE/2 characters, so no line costs more than a bounded
# amount of matching.
MAX_LINE = 8192


def cap(line: str) -> str:
    """A line of at most MAX_LINE characters (plus the " … " that marks where a longer one was cut)."""
    if len(line) <= MAX_LINE:
        return line
    half = MAX_LINE // 2
    return line[:half] + " … " + line[-half:]


LONG_LINE = 1 << 20  # a line longer than this is held as its two ends (more than `cap` keeps) while it is read


def lines_of(pieces: Iterable[str], limit: int = LONG_LINE) -> Iterator[str]:
    """The lines of a text given in pieces of any size (a file read a MiB at a time), without their newlines, in
    memory bounded by the piece size and `limit`: a line longer than `limit` is kept as its first and last
    `limit // 2` characters joined by " … ", which `cap` then cuts exactly as it would the whole line. How
    `llamalab inspect` reads a log of any size: the parser takes lines, never a path."""
    half = limit // 2
    head: str | None = None  # the start of a long line, once it is known to be long
    tail: list[str] = []  # the rest of the current line so far (at most `limit` characters once it is long)
    size = 0
    for piece in pieces:
        parts = piece.split("\n")
        for k, part in enumerate(parts):
            if k:  # a newline ended the current line
                yield _joined(head, tail)
                head, tail, size = None, [], 0
            if not part:
                continue
            tail.append(part)
            size += len(part)
            if size > limit:
                text = "".join(tail)
                if head is None:
                    head, text = text[:half], text[half:]
                tail, size = [text[-half:]], min(len(text), half)
    if head is not None or tail:
        yield _joined(head, tail)


def _joined(head: str | None, tail: list[str]) -> str:
    text = "".join(tail)
    return text if head is None else head + " … " + text


def _no_ansi(line: str) -> str:
    return _ANSI.sub("", line) if ("\x1b" in line or "[" in line) else line


def clean(line: str) -> str:
    """One log line without colour codes, carriage returns, the `M.SS.mmm.uuu L ` prefix and outer blanks, cut to
    MAX_LINE characters."""
    if len(line) > MAX_LINE:
        line = cap(line)
    if "\x1b" in line or "[" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        line = line.replace("\r", "")
    line = line.strip()
    if "]: " in line[:400] and (m := _SYSLOG.match(line)) and (t := _SYSLOG_TAIL.match(line, m.end())):
        line = line[t.end():].strip()
    if line[:1].isdigit() or line[:1] == "[":
        if m := _PREFIX.match(line):
            line = line[m.end():].lstrip()
    return line


HOST_EXACT = {"CPU", "CPU_Mapped", "AMX", "CPU_REPACK", "Host", "BLAS", "ACCEL"}


def is_host(name: str) -> bool:
    """True for host (system RAM) buffer types: CPU, CPU_Mapped, CPU_*, AMX, anything ending in `_Host`."""
    base = re.split(r"[\[(]", name, maxsplit=1)[0]
    return (base in HOST_EXACT or base.upper().startswith("CPU") or base.endswith("_Host")
            or base.upper() in ("AMX", "HOST"))


OLLAMA_RECORD = "ollama-record:"  # how _lines passes one of ollama's own memory records on to _line
_OLLAMA_KINDS = {"model weights": "model", "kv cache": "kv", "compute graph": "compute"}
_LOGFMT_PAIR = re.compile(r'([\w.]{1,64})=("(?:[^"\\]|\\.){0,8192}"|[^\s"]{0,1024})')
_GO_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)$")
_HUMAN_MIB = {"B": 1 / MIB, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "TiB": 1024.0 * 1024}


def _go_unquote(v: str) -> str:
    if len(v) < 2 or v[0] != '"' or v[-1] != '"':
        return v
    body, out, i = v[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(_GO_ESCAPES.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def logfmt(line: str) -> dict[str, str] | None:
    """The key=value pairs of one of ollama's (Go slog) records `time=… level=… source=… msg="…" k=v …`, values
    unquoted; None for any other line."""
    if not line.startswith("time=") or " msg=" not in line:
        return None
    pairs: dict[str, str] = {}
    for m in _LOGFMT_PAIR.finditer(line):
        if len(pairs) >= 64:
            break
        pairs.setdefault(m.group(1), _go_unquote(m.group(2)))
    return pairs if "msg" in pairs else None


def _human_mib(size: str) -> float | None:
    """ollama's format.HumanBytes2 (`11.9 GiB`, `680.0 MiB`, `0 B`) in MiB."""
    m = _HUMAN.match(size.strip())
    return round(float(m.group(1)) * _HUMAN_MIB[m.group(2)], 2) if m else None


def _ollama_lines(rec: dict[str, str]) -> Iterable[str]:
    """An ollama record as lines for _line: its message (llama.cpp's own words where ollama relays them:
    `offloaded 41/41 layers to GPU`), and its memory summaries as OLLAMA_RECORD lines."""
    msg = rec["msg"]
    kind = _OLLAMA_KINDS.get(msg)
    size = _human_mib(rec.get("size", "")) if kind else None
    name = rec.get("device") or rec.get("buffer_type") or rec.get("buffer") or rec.get("backend")
    if kind and size is not None and name and " " not in name and "|" not in name:
        yield f"{OLLAMA_RECORD} {kind} | {name} | {size:.2f} | {rec.get('backend') or ''}"
        return
    for m in msg.split("\n"):
        yield clean(m)


def _lines(raw_lines: Iterable[object], seen: dict[str, bool] | None = None) -> Iterable[str]:
    """Cleaned lines: CR splits a line, JSONL records (`--log-jsonl`) are unwrapped to their message, journald
    prefixes are dropped, and ollama's `time=… level=… msg="…"` records give their message (and memory
    summaries, see _ollama_lines)."""
    for raw in raw_lines:
        text = raw if isinstance(raw, str) else (raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray)
                                                  else str(raw))
        parts = (text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if ("\n" in text or "\r" in text)
                 else (text,))
        for part in parts:
            if "{" in part:
                s = _no_ansi(part).strip()
                start = s.find('{"')
                if start >= 0 and s.endswith("}") and '"msg"' in s or s.startswith('{"'):
                    try:
                        obj = json.loads(s[max(start, 0):])
                    except (ValueError, RecursionError):
                        obj = None
                    if isinstance(obj, dict):
                        msg = obj.get("msg")
                        if isinstance(msg, str):
                            for m in msg.split("\n"):
                                yield clean(m)
                        continue  # fit_memory_breakdown and other structured records repeat the text lines
            line = clean(part)
            at = line.find("time=", 0, 300)  # ollama's record, maybe behind a prefix clean() does not know
            if at >= 0 and (at == 0 or line[at - 1] == " ") and (rec := logfmt(line[at:])) is not None:
                if seen is not None:
                    seen["ollama"] = True
                yield from _ollama_lines(rec)
                continue
            if seen is not None and "ollama[" in part[:400] and not seen.get("ollama"):
                seen["ollama"] = bool(_SYSLOG_TAIL.search(part[:400]))
            yield line


# ---------------------------------------------------------------- patterns

# Every pattern here runs in time linear in the line: no two unbounded quantifiers can trade characters (an optional
# group between two runs of blanks takes the second run inside it: `(?:\(x\)\s*)?`, never `(?:\(x\))?\s*`), runs
# that follow a keyword cannot contain the keyword, and what could be long is bounded ({0,256}).
# tests/llamacpp/test_parse_bounds.py times every prefix of every keyword padded to just under MAX_LINE with each
# run. Where a pattern would need to look back from a keyword (buffer names, table rows), plain string operations do it.
NUM = r"(\d+(?:\.\d+)?)"
_BUF_TAIL = re.compile(r"buffer size\s*=\s*(\d+(?:\.\d+)?)\s*MiB")
_BUF_KINDS = {"model", "KV", "RS", "compute", "output", "input", "LoRA"}
_BUF_LOOKBACK = 512  # a buffer name is the word before `[kind] buffer size`, within this many characters
_LEGACY = [  # late 2023 / early 2024, before ggml-backend buffer names
    (re.compile(r"VRAM used:\s*" + NUM + r"\s*MiB"), "GPU", "model"),
    (re.compile(r"\bmem required\s*=\s*" + NUM + r"\s*MiB"), "CPU", "model"),
    (re.compile(r"VRAM kv self\s*=\s*" + NUM + r"\s*MB"), "GPU", "kv"),
    (re.compile(r"VRAM scratch buffer:\s*" + NUM + r"\s*MiB"), "GPU", "compute"),
]
_SCHED_COPIES = re.compile(r"sched copies\s*=\s*(\d+)")
_PP = re.compile(r"pipeline parallelism enabled(?:\s*\(\s*n_copies\s*=\s*(\d+)\s*\))?")
_PP_RETRY = re.compile(r"retrying without pipeline parallelism|compute buffer allocation failed, retrying")
_ALLOC_FAIL = re.compile(r"failed to allocate compute (?:pp |tg )?buffers?|compute buffer allocation failed")
_ALLOC_BUF = re.compile(r"failed to allocate (\S+) buffer of size (\d+)")
_CTX_FAIL = re.compile(r"failed to (?:initialize|create) (?:the )?context|failed to allocate compute (?:pp|tg) buffers"
                       r"|unable to load model|error loading model")
_GRAPH_NEW = re.compile(r"graph(?:\s*\(\s*pp bs\s*=\s*(\d+)\s*,\s*tg bs\s*=\s*(\d+)\s*\))?:\s*nodes\s*=\s*(\d+)"
                        r"(?:\s*/\s*(\d+))?\s*,\s*splits\s*=\s*(\d+)(?:\s*/\s*(\d+))?")
_GRAPH_NODES = re.compile(r"graph nodes\s*=\s*(\d+)(?:\s*\(with bs=\d+\)\s*,\s*(\d+))?")
# `(measure)` takes the blanks after it with it: `\s*(?:\(measure\))?\s*` would let two runs of blanks trade
# characters (a line with 8,000 blanks after `graph splits` took 60 s per MB of log)
_GRAPH_SPLITS = re.compile(r"graph splits\s*(?:\(measure\)\s*)?[=:]\s*(\d+)(?:\s*\(with bs=\d+\)\s*,\s*(\d+))?")
_CTX_FN = r"(?:llama_context|llama_new_context_with_model|llama_init_from_model)"
_CTX_KEY = re.compile(_CTX_FN + r"\s*:\s+(n_ctx|n_ctx_per_seq|n_ctx_seq|n_seq_max|n_batch|n_ubatch|flash_attn"
                      r"|kv_unified)\s*=\s*(\S+)")
_FA_AUTO = re.compile(r"Flash Attention was auto, set to (enabled|disabled)")
_METADATA = ("llama_model_loader: - ", "print_info:", "llm_load_print_meta:")
_META = re.compile(r"(?:print_info|llm_load_print_meta)\s*:\s+(n_embd|n_layer|n_ctx_train)\s*=\s*(\d+)\s*$")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# `size = …` (or `KV self size = …`) at the start of the line or after a blank or colon: checked by _kv_sum_match
# (the optional `(…)` takes the blanks after it, for the same reason as _GRAPH_SPLITS)
_KV_SUM = re.compile(r"size\s*=\s*" + NUM + r"\s*MiB\s*(?:\((?P<inner>[^)]{0,256})\)\s*)?,\s*(?P<pairs>.*)$")
_PAIR = re.compile(r"([^\s(]{1,32})\s*\((\w{1,32})\)\s*:\s*" + NUM + r"\s*MiB")
_CELLS = re.compile(r"(?<!\d)(\d+)\s+cells")
_LAYERS = re.compile(r"(?<!\d)(\d+)\s+layers")
_SEQS = re.compile(r"(?<!\d)(\d+)\s*(?:/\s*(\d+))?\s+seqs")
_KV_SIZE = re.compile(r"\bkv_size\s*=\s*(\d+)")
_KV_TYPES = re.compile(r"type_k\s*=\s*'(\w{1,32})'\s*,\s*type_v\s*=\s*'(\w{1,32})'")
_KV_NLAYER = re.compile(r"n_layer\s*=\s*(\d+)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ISWA = re.compile(r"creating\s+(non-SWA|SWA)\s+KV cache")
FIT_REDUCED = re.compile(r"context size reduced from (\d+) to (\d+)")
_FIT_START = re.compile(r"fitting params to (?:device|free) memory|getting device memory data|params_fit_impl")
FIT_OK = re.compile(r"successfully fit params")
_FIT_END = re.compile(r"fitting params to free memory took|params_fit: (?:successfully|failed)"
                      r"|fit_params: (?:successfully|failed)")
_FIT_FAILED = re.compile(r"failed to fit (?:params|CLI arguments)")
_FIT_ARGS_HEAD = re.compile(r"(?:printing|Printing) fitted CLI arguments")
_BREAKDOWN_HEAD = re.compile(r"memory breakdown \[MiB\]")
# linear in the line: the description is at most 512 characters (and stripped), the name at most 128
_DEVICE_LINE = re.compile(r"\s*+(?:-\s+)?(?P<name>[A-Za-z][\w.\-]{0,127})\s*:\s*+(?P<desc>.{0,512}?)"
                          r"\((?P<total>\d+) MiB,\s*(?P<free>\d+) MiB free\)")
_BUILD = re.compile(r"\bbuild(?:\s*=|:)?\s*(\d+)\s*\((\w{1,64})\)")
_DRAFT = re.compile(r"draft (?:model|context)|mtp draft")  # on the lower-cased line
_META_DEVICE = re.compile(r"creating a Meta device (?:for tensor parallelism )?(?:from|with) (\d+) devices")
_META_MEMBER = re.compile(r"- device (\d+): (?P<name>[^\s(]{1,128})(?:\s+\((?P<desc>[^()]{0,256})\))?")
_ENDPOINT_DESC = re.compile(r"^\[?[\w.:-]{1,200}\]?:\d{1,5}$")
_MMPROJ = re.compile(r"(?:compute_meta|clip_\w{1,64}|mtmd_\w{1,64})\s*:")


MAX_TABLE_ROWS = 256  # a breakdown table has a row per device and the host
MAX_TABLES = 64  # projected tables kept (a --fit prints a few)
MAX_DRAFTS = 256  # draft contexts kept (older llama-server made one per slot)
MAX_ERRORS = 100


def buffers(line: str) -> Iterable[tuple[str, str, float]]:
    """(name, kind, MiB) of each `NAME [KIND] buffer size = X MiB` in a line (at most 16).

    NAME is the word before KIND (or before `buffer size`): the run of characters other than blanks, `=` and `|`
    that starts the line or follows a blank, `|` or `:` (after `=`, the part after its first `:`), and does not end
    in `:`. KIND is model, KV, RS, compute, output, input, LoRA or `DSV4 <name> state`. Only the last 512
    characters before `buffer size` are looked at."""
    pos = done = 0
    for _ in range(16):
        i = line.find("buffer size", pos)
        if i < 0:
            return
        pos = i + 1
        tail = _BUF_TAIL.match(line, i)
        if not tail:
            continue
        head = line[max(done, i - _BUF_LOOKBACK):i]
        found = _buffer_name(head)
        if found:
            done = pos = tail.end()
            yield found[0], found[1], float(tail.group(1))


def _buffer_name(head: str) -> tuple[str, str] | None:
    if not head or not head[-1].isspace():
        return None
    words = head.rsplit(None, 3)
    if not words:
        return None
    if len(words) >= 2 and words[-1] in _BUF_KINDS:
        name = _name_word(words[-2])
        return (name, words[-1]) if name else (words[-1], "")
    if len(words) >= 4 and words[-1] == "state" and words[-3] == "DSV4":
        name = _name_word(words[-4])
        return (name, "DSV4") if name else ("state", "")
    name = _name_word(words[-1])
    return (name, "") if name else None


def _name_word(word: str) -> str | None:
    """The buffer name at the end of a blank-free word (see buffers)."""
    cut = max(word.rfind("="), word.rfind("|"))
    name = word[cut + 1:]
    if cut >= 0 and word[cut] == "=":  # a name never starts right after `=`; after a `:` inside the word it may
        colon = name.find(":")
        name = name[colon + 1:] if colon >= 0 else ""
    return name if name and not name.endswith(":") else None


def breakdown_row(line: str) -> tuple[str, str] | None:
    """(name, numbers) of a memory-breakdown row `… | - NAME | NUMBERS [|]`: NAME between the last two `|`
    (after a `-`), NUMBERS after the last one; a closing `|` and blanks at the end are dropped."""
    body = line.rstrip()
    if body.endswith("|"):
        body = body[:-1]
    k = body.rfind("|")
    if k < 0:
        return None
    j = body.rfind("|", 0, k)
    if j < 0:
        return None
    seg = body[j + 1:k].lstrip()
    if not seg.startswith("-"):
        return None
    name = seg[1:].strip()
    return (name, body[k + 1:]) if name else None


def _kv_sum_match(line: str) -> re.Match[str] | None:
    """The first `size = X MiB [(…)], PAIRS` whose `size` starts the line or follows a blank or `:`."""
    pos = 0
    for _ in range(32):
        m = _KV_SUM.search(line, pos)
        if not m:
            return None
        i = m.start()
        if i == 0 or line[i - 1].isspace() or line[i - 1] == ":":
            return m
        pos = i + 1
    return None


def numbers(text: str) -> list[float]:
    """The numbers in a breakdown row's text, in order (`-?N[.N]`)."""
    return [float(x) for x in _NUMBER.findall(text)]


def kv_cache_size(line: str) -> tuple[str, float, int | None, int | None] | None:
    """(kind, MiB, cells, layers) of a KV or recurrent-state summary `size = X MiB (N cells, L layers, …), K (…): …`
    (kind `kv` or `rs` by its first pair; cells and layers None where the line has none)."""
    m = _kv_sum_match(line) if "size" in line else None
    pairs = _PAIR.findall(m.group("pairs")) if m else []
    if not m or not pairs:
        return None
    first = pairs[0][0].upper()
    kind = "rs" if first.startswith(("R", "S")) and not first.startswith("K") else "kv"
    inner = m.group("inner") or ""
    cells, layers = _CELLS.search(inner), _LAYERS.search(inner)
    return (kind, float(m.group(1)), int(cells.group(1)) if cells else None,
            int(layers.group(1)) if layers else None)


def context_value(line: str) -> tuple[str, str] | None:
    """(key, value as printed) of a context's `llama_context: KEY = VALUE` line (n_ctx, n_ctx_per_seq, n_ctx_seq,
    n_seq_max, n_batch, n_ubatch, flash_attn, kv_unified)."""
    m = _CTX_KEY.search(line)
    return (m.group(1), m.group(2)) if m else None


def model_shape(line: str) -> tuple[str, int] | None:
    """(n_embd | n_layer | n_ctx_train, value) of the model's `print_info: KEY = N` line."""
    m = _META.search(line) if ("print_info" in line or "llm_load_print_meta" in line) else None
    return (m.group(1), int(m.group(2))) if m else None


def sched_copies(line: str) -> int | None:
    """N of the scheduler's `sched copies = N`."""
    m = _SCHED_COPIES.search(line) if "sched copies" in line else None
    return int(m.group(1)) if m else None


def graph_splits(line: str) -> int | None:
    """S of `graph[ (pp bs=…, tg bs=…)]: nodes = N[ / M], splits = S[ / T]` (the prompt graph's splits)."""
    m = _GRAPH_NEW.search(line) if "graph" in line else None
    return int(m.group(5)) if m else None


def device_line(line: str) -> tuple[str, str, int, int] | None:
    """(name, description, total MiB, free MiB) of a device line, the one parser of the two forms llama.cpp prints:
    `  NAME: DESC (T MiB, F MiB free)` (`--list-devices`, an rpc-server's start-up) and the log's
    `common_param:   - NAME    : DESC (T MiB, F MiB free)` (verbosity 4 and up; the part before `common_param:`,
    a time stamp or a JSON log record's head, is skipped)."""
    if "MiB free)" not in line:
        return None
    if (i := line.find("common_param:")) >= 0:
        line = line[i + len("common_param:"):]
    m = _DEVICE_LINE.match(line)
    return (m.group("name"), m.group("desc").strip(), int(m.group("total")), int(m.group("free"))) if m else None


@dataclass
class _Ctx:
    draft: bool = False
    kv: dict[str, float] = field(default_factory=dict)
    rs: dict[str, float] = field(default_factory=dict)
    output: dict[str, float] = field(default_factory=dict)
    input: dict[str, float] = field(default_factory=dict)
    compute: dict[str, float] = field(default_factory=dict)
    pass_open: bool = False
    summaries: list[KvSummary] = field(default_factory=list)
    pending: dict[str, float] = field(default_factory=dict)  # KV/RS buffers since the last summary
    pending_swa: bool | None = None
    kv_size: tuple[int | None, str | None, str | None, int | None] | None = None
    scalars: dict[str, object] = field(default_factory=dict)
    ended: bool = False
    failed: bool = False
    started: bool = False


@dataclass
class _State:
    led: Ledger
    model: dict[str, float] = field(default_factory=dict)  # buffer name → model MiB (this load, with draft)
    ctxs: list[_Ctx] = field(default_factory=list)
    draft_mode: bool = False
    breakdown: list[BreakdownRow] | None = None
    fit_args_next: bool = False
    fit_phase: bool = False  # between a --fit start line and the real model load: tables are projections
    alloc_fail_line: str | None = None  # the first failed allocation since the last retry without the pipeline
    meta_expect: int = 0  # "- device i: NAME" lines still to come after "creating a Meta device … N devices"
    meta_members: list[str] = field(default_factory=list)  # the devices the Meta() device spans, in its order
    ollama: dict[str, dict[str, float]] = field(default_factory=dict)  # ollama's last memory summary: kind → name → MiB
    ollama_round: set[str] = field(default_factory=set)  # backends of the current "compute graph" round

    def ctx(self) -> _Ctx:
        if not self.ctxs:
            self.ctxs.append(_Ctx(draft=self.draft_mode))
        return self.ctxs[-1]

    def ctx_for_context_line(self) -> _Ctx:
        """The context a KV/output/n_ctx line belongs to: a new one after a finished or failed context."""
        cur = self.ctx()
        if cur.ended or cur.failed:
            cur = _Ctx(draft=self.draft_mode)
            self._prune()
            self.ctxs.append(cur)
        cur.started = True
        return cur

    def _prune(self) -> None:
        """Forget main contexts that can no longer be the ledger's (not the last, not the last with buffers), and
        all but the last MAX_DRAFTS draft contexts: a log of a million contexts costs no more memory than one."""
        if len(self.ctxs) < 8:
            return
        mains = [c for c in self.ctxs if not c.draft]
        keep = {id(c) for c in mains[-1:]}
        with_buffers = [c for c in mains if c.kv or c.rs or c.output or c.compute]
        keep |= {id(c) for c in with_buffers[-1:]}
        keep |= {id(c) for c in [c for c in self.ctxs if c.draft][-MAX_DRAFTS:]}
        self.ctxs = [c for c in self.ctxs if id(c) in keep]

    def any_context(self) -> bool:
        return any(c.started for c in self.ctxs)


def parse(lines: Iterable[object], *, tensor_split: Sequence[float] | None = None) -> Ledger:
    """Parse llama.cpp / llama-server log lines into a Ledger. Never raises.

    `tensor_split` is the `-ts` the server ran with, where the caller knows it (the log does not print it): under
    `-sm tensor` it says how the Meta() device's weights and KV cache divide between its devices (split_meta)."""
    led = Ledger()
    st = _State(led=led)
    failure: tuple[str, str] | None = None  # the likeliest failure since the last context finished
    seen: dict[str, bool] = {}
    try:
        for line in _lines(lines, seen):
            if not line:
                continue
            try:
                ctxs = st.ctxs
                was_ended = bool(ctxs) and ctxs[-1].ended
                if line.startswith(_METADATA):  # the model's metadata echoed: never a failure, whatever it says
                    _metadata_line(st, line)
                    continue
                low = line.lower()
                _line(st, line, low)
                if _failure_hint(low):
                    failure = _better_failure(failure, line, low)
                ctxs = st.ctxs
                if ctxs and ctxs[-1].ended and not was_ended:
                    failure = None  # what failed on the way (a retried allocation) did not stop the load
            except Exception as e:  # a malformed line never costs the rest of the log
                if len(led.errors) < MAX_ERRORS:
                    led.errors.append(f"{type(e).__name__}: {e}")
    except Exception as e:
        led.errors.append(f"{type(e).__name__}: {e}")
    try:
        _finish(st)
        led.failure = _failure_text(failure)
    except Exception as e:
        led.errors.append(f"{type(e).__name__}: {e}")
    try:
        if seen.get("ollama"):
            led.wrapper = "ollama"
        _ollama_finish(st)
        split_meta(led, st.meta_members, tensor_split)
    except Exception as e:
        led.errors.append(f"{type(e).__name__}: {e}")
    return led


def _metadata_line(st: _State, line: str) -> None:
    """The model's own metadata echoed (its name, tokenizer, chat template): never one of llama.cpp's messages,
    whatever text the model file put there. Only the shape (n_embd, n_layer, n_ctx_train) is read; the line ends a
    breakdown table."""
    st.breakdown = None
    if not line.startswith("llama_model_loader") and (m := _META.match(line)) and not st.draft_mode:
        setattr(st.led, m.group(1), int(m.group(2)))


def _ollama_record(st: _State, line: str) -> None:
    """One of ollama's memory summaries (`model weights`, `kv cache`, `compute graph`: per device, or per backend
    and buffer type in mid-2025 builds). A summary repeats whole for every load attempt and every graph
    reservation; the last one stands."""
    try:
        kind, name, mib, backend = (p.strip() for p in line[len(OLLAMA_RECORD):].split("|"))
        val = float(mib)
    except ValueError:
        return
    cur = st.ollama
    if kind == "model" and (cur.get("kv") or cur.get("compute")):
        cur.clear()  # a new summary (another load attempt)
        st.ollama_round = set()
    if kind == "compute" and backend:
        if backend in st.ollama_round:  # another graph reservation: it replaces the previous one
            cur["compute"] = {}
            st.ollama_round = set()
        st.ollama_round.add(backend)
        table = cur.setdefault("compute", {})
        table[name] = round(table.get(name, 0.0) + val, 2)
        return
    cur.setdefault(kind, {})[name] = val


def _ollama_finish(st: _State) -> None:
    """ollama's engine prints no llama.cpp buffer lines; its own last summary fills the ledger then."""
    led = st.led
    if not st.ollama or led.devices or led.host:
        return
    for kind, table in st.ollama.items():
        for name, mib in table.items():
            (led.host if is_host(name) else led.devices).setdefault(name, Buffers()).add(kind, mib)
    led.wrapper = "ollama"


def _line(st: _State, line: str, low: str) -> None:
    """One cleaned line; `low` is it lower-cased. Each pattern runs only where its keyword is in the line; each
    reader below returns True where the line is taken and nothing after it may read it."""
    if (_structure_line(st, line, low) or _buffer_line(st, line) or _context_line(st, line)
            or _pipeline_line(st, line, low)):
        return
    _fit_line(st, line)


def _structure_line(st: _State, line: str, low: str) -> bool:  # noqa: C901 - a flat dispatch over line kinds
    """ollama records, breakdown tables, echoed metadata, the fit's start and printed arguments, draft models and
    `-sm tensor`'s Meta() device."""
    led = st.led
    if line.startswith(OLLAMA_RECORD):
        _ollama_record(st, line)
        return True
    # memory breakdown tables: a header, then "| - NAME | numbers |" rows
    if st.breakdown is not None:
        row = breakdown_row(line) if "-" in line else None
        if row and "memory breakdown [MiB]" not in line:
            if len(st.breakdown) < MAX_TABLE_ROWS:
                st.breakdown.append(_breakdown_row(*row))
            return True
        st.breakdown = None
    if "memory breakdown [MiB]" in line:
        table: list[BreakdownRow] = []
        if not st.fit_phase and any(c.started and (c.ended or c.compute) for c in st.ctxs):
            led.breakdown_final = table
        elif len(led.breakdown_projected_tables) < MAX_TABLES:
            led.breakdown_projected_tables.append(table)
        st.breakdown = table
        return True
    if line.startswith(_METADATA):
        _metadata_line(st, line)
        return True
    if st.fit_args_next:
        st.fit_args_next = False
        if line.startswith("-"):
            led.fit_args = line
            if m := re.search(r"(?:^|\s)-c\s+(\d+)", line):
                led.fit_ctx_to = int(m.group(1))
            return True
    fit = "fit" in line
    if (fit or "getting device memory" in line) and _FIT_START.search(line) and not st.fit_phase:
        st.fit_phase = True
        if st.any_context():  # a new run's fit: what the previous run projected no longer applies
            led.breakdown_projected_tables = []
            led.fit_ctx_from = led.fit_ctx_to = led.fit_status = None
    if "draft" in low and _DRAFT.search(low):
        st.draft_mode = True
    if "Meta device" in line and (m := _META_DEVICE.search(line)):
        st.meta_expect, st.meta_members = min(int(m.group(1)), MAX_TABLE_ROWS), []
        return True
    if st.meta_expect and "- device" in line and (m := _META_MEMBER.search(line)):
        st.meta_expect -= 1
        st.meta_members.append(_member_name(m.group("name"), m.group("desc")))
        return True
    return False


def _buffer_line(st: _State, line: str) -> bool:
    """Buffer sizes (and older llama.cpp's VRAM lines), KV summaries, the KV cache's size and kind."""
    if "buffer size" in line:
        found = False
        for name, kind, mib in buffers(line):
            found = True
            _buffer(st, line, name, kind, mib)
        if found:
            return True
    if "VRAM" in line or "mem required" in line:
        for pat, name, kind in _LEGACY:
            if m := pat.search(line):
                _add_buffer(st, line, name, kind, float(m.group(1)))
                return True

    if "size" in line:
        if (m := _kv_sum_match(line)) and _kv_summary(st, line, m):
            return True
        if m := _KV_SIZE.search(line):
            c = st.ctx_for_context_line()
            types = _KV_TYPES.search(line)
            nl = _KV_NLAYER.search(line)
            c.kv_size = (int(m.group(1)), types.group(1) if types else None, types.group(2) if types else None,
                         int(nl.group(1)) if nl else None)
    if "KV cache" in line and (m := _ISWA.search(line)):
        st.ctx_for_context_line().pending_swa = m.group(1) == "SWA"
    return False


def _context_line(st: _State, line: str) -> bool:
    """A context's scalars (n_ctx, n_seq_max, flash attention, …) and the model's (n_embd, n_layer, n_ctx_train)."""
    led = st.led
    if ("llama_context" in line or "llama_new_context" in line or "llama_init_from_model" in line) \
            and (m := _CTX_KEY.search(line)):
        key, val = m.group(1), m.group(2)
        c = st.ctx_for_context_line()
        if key in c.scalars and (c.kv or c.compute or c.output):
            # a second n_ctx for a context that already has buffers: a new context
            c.ended = True
            c = st.ctx_for_context_line()
        if key in ("flash_attn", "kv_unified"):
            c.scalars[key] = _boolish(val)
        elif val.isdecimal():
            c.scalars["n_ctx_seq" if key == "n_ctx_per_seq" else key] = int(val)
        return True
    if "Flash Attention" in line and (m := _FA_AUTO.search(line)):
        st.ctx().scalars["flash_attn"] = m.group(1) == "enabled"
    if ("print_info" in line or "llm_load_print_meta" in line) and (m := _META.search(line)):  # behind a prefix
        key, val = m.group(1), int(m.group(2))
        if not st.draft_mode:
            setattr(led, key, val)
        return True
    return False


def _pipeline_line(st: _State, line: str, low: str) -> bool:
    """Pipeline parallelism (enabled, retried without), allocation failures, graph nodes and splits, scheduler
    copies."""
    if "pipeline parallelism enabled" in line and (m := _PP.search(line)):
        c = st.ctx()
        c.scalars["pp_enabled_line"] = True
        if m.group(1):
            c.scalars["pp_enabled_copies"] = int(m.group(1))
        return True
    retry = "retrying" in line and bool(_PP_RETRY.search(line))
    if retry:
        c = st.ctx()
        c.scalars["pp_retry"] = True
        c.scalars.setdefault("pp_dropped_reason", st.alloc_fail_line)
        st.alloc_fail_line = None
        c.compute.clear()
        c.pass_open = False
    elif st.alloc_fail_line is None and ("fail" in low or "out of memory" in low) and _oom(low):
        st.alloc_fail_line = line[:240]  # what did not fit, should llama.cpp retry without pipeline parallelism
    if "fail" in line:
        if _ALLOC_FAIL.search(line):
            st.ctx().scalars["compute_alloc_failed"] = True
        if m := _ALLOC_BUF.search(line):
            failures = st.ctx().scalars.setdefault("alloc_failures", [])
            if isinstance(failures, list) and len(failures) < MAX_TABLE_ROWS:
                failures.append({"buffer": m.group(1), "mib": round(int(m.group(2)) / MIB, 2)})
    if (("fail" in line or "load model" in line or "loading model" in line) and _CTX_FAIL.search(line)
            and st.ctxs and not retry):
        c = st.ctx()
        if c.started or "context" in line or "compute" in line:
            c.failed = True
            c.pass_open = False
    if "graph" in line:
        _graph_line(st, line)
    if "sched copies" in line and (m := _SCHED_COPIES.search(line)):
        c = st.ctx()
        c.scalars["sched_copies"] = int(m.group(1))
        c.ended, c.pass_open = True, False
        if c.draft:
            st.draft_mode = False
    elif st.ctxs and st.ctx().draft and st.ctx().ended and "graph" in line:
        st.draft_mode = False
    return False


def _graph_line(st: _State, line: str) -> None:
    """Graph nodes and splits, in either form (`graph: nodes = N, splits = S`; `graph nodes = N`, `graph splits = S`):
    the splits end the context's reserve pass."""
    if m := _GRAPH_NEW.search(line):
        c = st.ctx()
        c.scalars["graph_nodes"], c.scalars["graph_splits"] = int(m.group(3)), int(m.group(5))
        c.scalars["graph_nodes_tg"] = int(m.group(4)) if m.group(4) else int(m.group(3))
        c.scalars["graph_splits_tg"] = int(m.group(6)) if m.group(6) else int(m.group(5))
        c.ended, c.pass_open = True, False
        return
    if m := _GRAPH_NODES.search(line):
        c = st.ctx()
        c.scalars["graph_nodes"] = int(m.group(1))
        c.scalars["graph_nodes_tg"] = int(m.group(2)) if m.group(2) else int(m.group(1))
        c.pass_open = False
    if m := _GRAPH_SPLITS.search(line):
        c = st.ctx()
        c.scalars["graph_splits"] = int(m.group(1))
        c.scalars["graph_splits_tg"] = int(m.group(2)) if m.group(2) else int(m.group(1))
        c.ended, c.pass_open = True, False


def _fit_line(st: _State, line: str) -> None:
    """Layers offloaded, the fit's context and outcome, device memory, the build."""
    led = st.led
    fit = "fit" in line
    if "offloaded" in line and (m := _OFFLOADED.search(line)):
        if not st.draft_mode:
            _maybe_new_load(st)
            led.layers_offloaded, led.layers_total = int(m.group(1)), int(m.group(2))
    if "context size reduced" in line and (m := FIT_REDUCED.search(line)):
        if led.fit_ctx_from is None:
            led.fit_ctx_from = int(m.group(1))
        led.fit_ctx_to = int(m.group(2))
    if fit:
        if FIT_OK.search(line):
            led.fit_status = "ok"
        elif _FIT_FAILED.search(line):
            led.fit_status = "failed"
        if _FIT_END.search(line):
            st.fit_phase = False
        if _FIT_ARGS_HEAD.search(line):
            st.fit_args_next = True
    if "MiB free)" in line and (dm := device_line(line)):
        led.device_memory[dm[0]] = (dm[2], dm[3])
        if len(led.device_desc) < MAX_TABLE_ROWS:
            led.device_desc.setdefault(dm[0], dm[1][:512])
    if led.build is None and "build" in line and (m := _BUILD.search(line)):
        led.build = f"b{m.group(1)}-{m.group(2)}"


def _boolish(val: str) -> bool | None:
    v = val.strip().strip("'\"").lower()
    if v in ("1", "true", "enabled", "on", "yes"):
        return True
    if v in ("0", "false", "disabled", "off", "no"):
        return False
    return None


def _maybe_new_load(st: _State) -> None:
    """A model line after a context started: a new model load (unless a draft model is loading)."""
    if st.draft_mode or not st.any_context():
        return
    st.alloc_fail_line = None
    st.model.clear()
    st.ctxs = []
    st.led.draft = False
    st.led.mmproj_compute.clear()
    st.led.layers_offloaded = st.led.layers_total = None


def _buffer(st: _State, line: str, name: str, kind: str, mib: float) -> None:
    kind = {"model": "model", "KV": "kv", "RS": "rs", "compute": "compute", "output": "output", "input": "input",
            "LoRA": "lora", "DSV4": "rs", "": "model"}.get(kind, "")
    if not kind:
        return
    if kind == "model" and not re.search(r"[A-Z0-9\[(]", name):
        return  # "… the buffer size = …" in prose, not a buffer type name
    _add_buffer(st, line, name, kind, mib)


def _add_buffer(st: _State, line: str, name: str, kind: str, mib: float) -> None:
    led = st.led
    if kind == "lora":
        led.lora[name] = round(led.lora.get(name, 0.0) + mib, 2)
        return
    if _MMPROJ.search(line):  # the multimodal projector (clip): its own model and compute buffers
        if kind == "compute":
            led.mmproj_compute[name] = round(led.mmproj_compute.get(name, 0.0) + mib, 2)
        return
    if kind == "model":
        _maybe_new_load(st)
        if not st.model and not st.draft_mode:
            led.n_loads += 1
        if st.draft_mode:
            led.draft = True
        st.model[name] = round(st.model.get(name, 0.0) + mib, 2)
        return
    if kind == "compute":
        c = st.ctx()
        if not c.pass_open:
            c.compute = {}
            c.pass_open = True
        c.started = True
        # a real load prints each compute buffer once (ggml-alloc skips a buffer type shared by two backends),
        # so a name repeated in one pass is another buffer: summed. A --fit dry run prints per backend: max.
        c.compute[name] = (max(c.compute.get(name, 0.0), mib) if st.fit_phase
                           else round(c.compute.get(name, 0.0) + mib, 2))
        return
    c = st.ctx_for_context_line()
    if kind in ("kv", "rs"):
        # a KV line after this context's compute pass is a new context (a second run pasted below)
        if c.compute and not c.pass_open:
            c.ended = True
            c = st.ctx_for_context_line()
        target = c.kv if kind == "kv" else c.rs
        target[name] = round(target.get(name, 0.0) + mib, 2)
        if kind == "kv":
            c.pending[name] = round(c.pending.get(name, 0.0) + mib, 2)
    elif kind == "input":  # early 2024: the graph inputs' own buffer, printed once per context
        c.input[name] = round(c.input.get(name, 0.0) + mib, 2)
    else:  # output
        c.output[name] = round(c.output.get(name, 0.0) + mib, 2)


def _kv_summary(st: _State, line: str, m: re.Match[str]) -> bool:
    pairs = _PAIR.findall(m.group("pairs"))
    if not pairs:
        return False
    inner = m.group("inner") or ""
    first = pairs[0][0].upper()
    kind = "rs" if first.startswith(("R", "S")) and not first.startswith("K") else "kv"
    c = st.ctx_for_context_line()
    s = KvSummary(size_mib=float(m.group(1)), kind=kind)
    if cm := _CELLS.search(inner):
        s.cells = int(cm.group(1))
    if lm := _LAYERS.search(inner):
        s.layers = int(lm.group(1))
    if sm := _SEQS.search(inner):
        s.seqs = sm.group(0).replace(" seqs", "").replace(" ", "")
        if sm.group(2):
            s.n_stream = int(sm.group(2))
    if kind == "kv":
        s.k_type, s.k_mib = pairs[0][1], float(pairs[0][2])
        if len(pairs) > 1:
            s.v_type, s.v_mib = pairs[1][1], float(pairs[1][2])
        if c.kv_size:
            cells, kt, vt, nl = c.kv_size
            s.cells = s.cells or cells
            s.layers = s.layers or nl
            c.kv_size = None
        s.swa = c.pending_swa
        c.pending_swa = None
        s.buffers = dict(c.pending)
        c.pending = {}
    s_list = c.summaries
    s_list.append(s)
    return True


def _breakdown_row(name: str, rest: str) -> BreakdownRow:
    nums = numbers(rest)
    row = BreakdownRow(name=name.strip())
    if len(nums) >= 7:
        row.total, row.free, row.self_, row.model, row.context, row.compute, row.unaccounted = nums[:7]
    elif len(nums) >= 4:  # host row: self = model + context + compute
        row.self_, row.model, row.context, row.compute = nums[:4]
    return row


def _finish(st: _State) -> None:
    led = st.led
    main = _main_context(st)
    drafts = [c for c in st.ctxs if c.draft and (c.started or c.scalars)]

    def table(name: str) -> Buffers:
        return (led.host if is_host(name) else led.devices).setdefault(name, Buffers())

    for name, mib in st.model.items():
        table(name).add("model", mib)
    for c in ([main] if main else []) + drafts:
        for kind, d in (("kv", c.kv), ("rs", c.rs), ("output", c.output), ("input", c.input), ("compute", c.compute)):
            for name, mib in d.items():
                table(name).add(kind, mib)
    if any(c.kv or c.compute or c.output or c.rs for c in drafts):
        led.draft = True
    if led.breakdown_projected_tables:
        led.breakdown_projected = led.breakdown_projected_tables[0]
    if main is None:
        return
    sc = main.scalars
    for key in ("n_ctx", "n_ctx_seq", "n_seq_max", "n_batch", "n_ubatch", "flash_attn", "kv_unified", "graph_nodes",
                "graph_splits", "graph_nodes_tg", "graph_splits_tg", "sched_copies", "pp_enabled_copies"):
        if key in sc:
            setattr(led, key, sc[key])
    led.pp_enabled_line = bool(sc.get("pp_enabled_line"))
    led.pp_retry = bool(sc.get("pp_retry"))
    if led.pp_retry:
        led.pp_dropped_reason = str(sc.get("pp_dropped_reason") or "the compute buffers did not fit")
    led.compute_alloc_failed = bool(sc.get("compute_alloc_failed"))
    failures = sc.get("alloc_failures")
    led.alloc_failures = list(failures) if isinstance(failures, list) else []
    led.context_failed = main.failed and not main.ended
    _finish_caches(led, main)
    led.n_copies = led.sched_copies if led.sched_copies is not None else led.pp_enabled_copies
    led.pipeline_parallel = _pp_state(led)


def _main_context(st: _State) -> _Ctx | None:
    """The last main context; a last one cut off before any buffer line (a truncated paste) leaves the one before."""
    mains = [c for c in st.ctxs if not c.draft and (c.started or c.scalars)]
    main = mains[-1] if mains else None
    with_buffers = [c for c in mains if c.kv or c.rs or c.output or c.compute]
    if main is not None and with_buffers and main is not with_buffers[-1] and not (main.kv or main.output
                                                                                   or main.compute or main.rs):
        main = with_buffers[-1]
    return main


def _finish_caches(led: Ledger, main: _Ctx) -> None:
    """The main context's KV and recurrent caches; `led.kv` the one that sets the context (not SWA, most cells)."""
    led.kv_caches = [s for s in main.summaries if s.kind == "kv"]
    led.rs_caches = [s for s in main.summaries if s.kind == "rs"]
    if main.kv_size and not led.kv_caches:  # kv_size printed, summary cut off
        cells, kt, vt, nl = main.kv_size
        led.kv_caches = [KvSummary(cells=cells, layers=nl, k_type=kt, v_type=vt, buffers=dict(main.pending))]
    for s in led.kv_caches:
        if s.cells is None and led.n_ctx and len(led.kv_caches) == 1:
            s.cells = led.n_ctx  # 2024: the KV cache has n_ctx cells
        if not s.buffers and len(led.kv_caches) == 1:
            s.buffers = dict(main.kv)
    if led.kv_caches:
        led.kv = max(led.kv_caches, key=lambda s: (s.swa is not True, s.total_cells or 0, s.size_mib or 0))


def _pp_state(led: Ledger) -> bool | None:
    """Pipeline parallelism is on only with more than one scheduler copy: one copy overlaps nothing. So the
    number of copies decides where the log prints one — `sched copies = N` (2026), else the N of an old
    `pipeline parallelism enabled (n_copies=N)` line (the scheduler's own count, printed by the same call) — and
    N = 1 is off in either form. A retry without pipeline parallelism is off. Otherwise a bare "enabled" line
    means on (the copies are not printed: llama.cpp's default is 4); a log that says none of these gives None."""
    if led.pp_retry:
        return False
    if led.sched_copies is not None:
        return led.sched_copies > 1
    if led.pp_enabled_copies is not None:
        return led.pp_enabled_copies > 1
    if led.pp_enabled_line:
        return True
    return None


# ---------------------------------------------------------------- -sm tensor: the Meta() device

EXACT_ON_EVERY_DEVICE = ("compute", "output", "input")  # one allocation of the printed size on every device


def _member_name(name: str, desc: str | None) -> str:
    """A Meta device member as its buffers are named: rpc devices print as `RPC0 (host:port)` in the device list
    but their buffers as `RPC0[host:port]`."""
    if desc and name.startswith("RPC") and "[" not in name and _ENDPOINT_DESC.match(desc.strip()):
        return f"{name}[{desc.strip()}]"
    return name


def is_meta(name: str) -> bool:
    return name.startswith("Meta(")


def _shares(n: int, tensor_split: Sequence[float] | None) -> tuple[list[float], str]:
    """Each device's share of a split tensor: `-ts` where given (llama.cpp reads the first n values; missing ones
    are 0), else equal (llama.cpp's default when -ts is absent or all zero)."""
    ts = [max(0.0, float(x)) for x in (tensor_split or [])][:n]
    ts += [0.0] * (n - len(ts))
    total = sum(ts)
    if total <= 0:
        return [1.0 / n] * n, "equal"
    return [x / total for x in ts], "-ts"


def split_meta(led: Ledger, members: Sequence[str], tensor_split: Sequence[float] | None = None) -> None:
    """Attribute the buffers of a Meta() device (`-sm tensor`) to the devices it spans, in place.

    What llama.cpp prints (ggml-backend-meta.cpp, b11312): a Meta buffer's size is the LARGEST of its per-device
    buffers, and its name is `Meta()` (the device list is lost to a moved-from vector), so the members come from
    the `creating a Meta device … - device i: NAME` lines. Per kind:
    - compute, output, input: allocated with the same size on every device — exact.
    - KV cache / recurrent state: split by heads in the proportion of -ts (equal without it); the cache's summary
      line (`size = X MiB`) is the whole unsplit cache, so the device with the largest share holds the printed
      figure and the others share the rest — exact in total, an estimate per device past two devices.
    - model: split tensors follow -ts, but norms and other small tensors are mirrored on every device; the log
      has no total, so each device is charged printed × its share / the largest share — exact for the largest,
      an estimate (upper bound) for the others.
    Not in the log at all: the meta backend's temporary reduction buffers and the communication library's own
    memory (NCCL/RCCL), which the driver check shows as unaccounted."""
    metas = [n for n in led.devices if is_meta(n)]
    if not metas:
        return
    record: dict[str, Any] = {"printed": {}, "devices": [], "shares": [], "shares_from": None, "kv_total_mib": None,
                              "exact": [], "estimated": [], "attributed": False, "note": ""}
    led.meta = record
    for name in metas:
        b = led.devices[name]
        record["printed"][name] = {f"{k}_mib": getattr(b, f"{k}_mib") for k in KINDS}
    inner = [p.strip() for p in metas[0][5:-1].split(",") if p.strip()] if metas[0].endswith(")") else []
    devs = list(inner or members)
    record["devices"] = devs
    if not devs:
        record["note"] = ("the log names no member devices (no \"creating a Meta device\" lines): the Meta() buffers "
                          "stay as one device")
        return
    shares, source = _shares(len(devs), tensor_split)
    record["shares"], record["shares_from"] = [round(x, 4) for x in shares], source
    top = max(range(len(devs)), key=lambda i: shares[i])
    printed = Buffers()
    for name in metas:
        _add_buffers(printed, led.devices.pop(name))
    per: dict[str, Buffers] = {d: Buffers() for d in devs}
    exact: list[str] = []
    estimated: list[str] = []
    for k in KINDS:
        v = getattr(printed, f"{k}_mib")
        if v is not None:
            total = _cache_total(led, metas, k) if k in ("kv", "rs") else None
            how = _attribute_kind(per, k, v, total, shares, top)
            if how == "split" and k == "kv" and total is not None:
                record["kv_total_mib"] = round(total, 2)
            (exact if how == "exact" or (how == "split" and len(devs) == 2) or (how == "share" and len(devs) == 1)
             else estimated).append(k)
    for d, b in per.items():
        _add_buffers(led.devices.setdefault(d, Buffers()), b)
    for cache in (*led.kv_caches, *led.rs_caches):
        _split_cache_buffers(cache, metas, devs, shares, top)
    record["exact"], record["estimated"], record["attributed"] = exact, estimated, True
    record["note"] = meta_note(record)


def _add_buffers(target: Buffers, b: Buffers) -> None:
    for k in KINDS:
        v = getattr(b, f"{k}_mib")
        if v is not None:
            target.add(k, v)


def _attribute_kind(per: dict[str, Buffers], kind: str, printed: float, total: float | None, shares: list[float],
                    top: int) -> str:
    """One kind of the Meta() buffers' printed MiB attributed to the devices in `per` (in order), by split_meta's
    rules; how: `exact` (the same on every device), `split` (the cache's whole size known: the top share holds the
    printed part, the others share the rest) or `share` (printed × share / the top share)."""
    devs = list(per)
    if kind in EXACT_ON_EVERY_DEVICE:
        for d in devs:
            per[d].add(kind, printed)
        return "exact"
    if total is not None and total + 0.01 >= printed and len(devs) > 1:
        rest_share = sum(shares[i] for i in range(len(devs)) if i != top)
        for i, d in enumerate(devs):
            got = printed if i == top else (total - printed) * (shares[i] / rest_share if rest_share else 0.0)
            per[d].add(kind, round(got, 2))
        return "split"
    for i, d in enumerate(devs):
        per[d].add(kind, round(printed * shares[i] / shares[top], 2))
    return "share"


def _cache_total(led: Ledger, metas: list[str], kind: str) -> float | None:
    """The whole (unsplit) size of the caches held by the Meta() buffers, from their summary lines."""
    caches = led.kv_caches if kind == "kv" else led.rs_caches
    sizes = [c.size_mib for c in caches if c.size_mib is not None and any(m in c.buffers for m in metas)]
    return round(sum(sizes), 2) if sizes else None


def _split_cache_buffers(cache: KvSummary, metas: list[str], devs: list[str], shares: list[float], top: int) -> None:
    """A cache summary's Meta() buffer replaced by its devices' parts (so KV bytes per token are per device)."""
    printed = sum(cache.buffers.pop(m) for m in metas if m in cache.buffers) if any(m in cache.buffers for m in metas) \
        else None
    if printed is None:
        return
    total = cache.size_mib if cache.size_mib is not None and cache.size_mib + 0.01 >= printed else None
    rest_share = sum(s for i, s in enumerate(shares) if i != top)
    for i, d in enumerate(devs):
        if total is not None and len(devs) > 1:
            got = printed if i == top else (total - printed) * (shares[i] / rest_share if rest_share else 0.0)
        else:
            got = printed * shares[i] / shares[top]
        cache.buffers[d] = round(cache.buffers.get(d, 0.0) + got, 2)


def meta_note(record: dict[str, Any] | None) -> str:
    """One sentence on how a -sm tensor ledger's per-device figures were made, and what the log cannot tell."""
    if not record:
        return ""
    if not record.get("attributed"):
        return record.get("note") or ""
    devs = ", ".join(record["devices"])
    how = ("equal shares (no -ts)" if record.get("shares_from") == "equal" else
           "the -ts shares " + ":".join(f"{s:g}" for s in record.get("shares") or []))
    exact = ", ".join(record.get("exact") or []) or "none"
    est = ", ".join(record.get("estimated") or []) or "none"
    return (f"-sm tensor: llama.cpp prints each Meta() buffer once, as its largest per-device part; attributed to "
            f"{devs} by {how}. Exact per device: {exact} (compute and output are allocated at the printed size on "
            f"every device; the KV cache's summary gives its whole size). Estimated: {est} (weights: mirrored tensors "
            "are not in the log, so other devices are charged by their share). Not in the log: the meta backend's "
            "reduction buffers and NCCL/RCCL's own memory — the driver check shows them as unaccounted.")


ONE_COPY = "on, 1 copy (no extra copies)"
DROPPED = "off (llama.cpp dropped it: the compute buffers did not fit)"


def pp_label(pipeline_parallel: bool | None, copies: int | None, enabled_line: bool | None = None,
             dropped: bool = False) -> str:
    """Pipeline parallelism in the one vocabulary every output uses: "on, 4 copies"; "on, 1 copy (no extra
    copies)" where llama.cpp set it up (it prints "pipeline parallelism enabled") with one scheduler copy, which
    overlaps nothing and allocates nothing extra, so in memory and speed it is as good as off (pipeline_parallel
    is False); DROPPED where llama.cpp retried without it because the compute buffers did not fit; "off";
    "unknown"."""
    if dropped:
        return DROPPED
    if copies is not None and copies > 1 and pipeline_parallel is not False:
        return f"on, {copies} copies"
    if copies == 1 and enabled_line:
        return ONE_COPY
    if pipeline_parallel is True:
        return "on" + (f", {copies} copies" if copies else "")
    if pipeline_parallel is False or copies == 1:
        return "off"
    return "unknown"


def pp_label_of(ledger: dict[str, Any]) -> str:
    """`pp_label` of a stored ledger (Ledger.to_json): the copies as printed in either form (`sched copies = N`,
    else the old `(n_copies=N)`)."""
    copies = ledger.get("sched_copies")
    if copies is None:
        copies = ledger.get("pp_enabled_copies")
    return pp_label(ledger.get("pipeline_parallel"), copies, ledger.get("pp_enabled_line"),
                    dropped=bool(ledger.get("pp_retry")))


# ---------------------------------------------------------------- failures

def _has(pattern: str) -> Callable[[str], re.Match[str] | None]:
    return re.compile(pattern).search


def _oom(low: str) -> bool:
    """An allocation that failed: the words for it, or an allocator call followed later by `fail`."""
    if _OOM_WORDS.search(low):
        return True
    m = _ALLOC_CALL.search(low)
    return m is not None and "fail" in low[m.end():]


def _rpc_unreachable(low: str) -> bool:
    if "failed to connect" in low:
        return True
    i = low.find("rpc")
    return i >= 0 and "connection refused" in low[i + 3:]


_OOM_WORDS = re.compile(r"failed to allocate|unable to allocate|out of memory|erroroutofdevicememory|std::bad_alloc"
                        r"|hiperroroutofmemory|kiogpucommandbuffercallbackerroroutofmemory")
_ALLOC_CALL = re.compile(r"cudamalloc|ggml_backend_\w{0,64}?alloc|ggml_gallocr|alloc_tensor_range")
# (test on the lower-cased line, reason); the first that matches a line names its failure
_FAILURES: list[tuple[Callable[[str], object], str]] = [
    (_oom, "out of memory"),
    (_has(r"invalid magic characters|not a gguf file|gguf_init_from_\w{1,64}: failed to read magic"),
     "the model file is not a GGUF file"),
    # the loader's own words for why ("failed to open GGUF file '…' (No such file or directory)", "failed to read
    # key-value pairs"), printed before llama_model_load's "failed to load model from …", which says only that
    (_has(r"gguf_init_from_\w{1,64}: (?:failed|invalid)"), "model load error"),
    (_has(r"error: (?:invalid argument|unknown argument|invalid value)"), "unsupported flag"),
    (_has(r"unknown argument|error while handling argument"), "unsupported flag"),
    (_has(r"failed to load model|error loading model|llama_model_load: error|unable to load model"),
     "model load error"),
    (_has(r"couldn't bind|address already in use|failed to bind"), "port already in use"),
    (_rpc_unreachable, "could not reach an rpc-server"),
    (_has(r"ggml_assert|segmentation fault|aborted|terminate called"), "llama.cpp crashed (assertion or signal)"),
]
# on the lower-cased line: every line a test of _FAILURES accepts has one of these words
_FAILURE_WORDS = ("fail", "error", "out of memory", "invalid", "unknown arg", "bind", "abort", "segmentation",
                  "terminate", "bad_alloc", "assert", "refused", "connect", "unable", "not a gguf", "already in use")


def _failure_hint(low: str) -> bool:
    for w in _FAILURE_WORDS:
        if w in low:
            return True
    return False

# lines that mention a failure but are not one: pipeline parallelism's own fallback, fit's dry-run diagnostics
_NOT_FAILURE = re.compile(r"retrying without pipeline parallelism|failed to fit params|for bugs during this step"
                          r"|failed to allocate host buffer for async uploads")
_PRIORITY = {"out of memory": 0, "the model file is not a GGUF file": 1}


def _better_failure(found: tuple[str, str] | None, line: str, low: str) -> tuple[str, str] | None:
    """`found` (reason, line) or this line's failure where it ranks higher; the first of equal rank stays."""
    if _NOT_FAILURE.search(low):
        return found
    for test, reason in _FAILURES:
        if test(low):
            if found is None or _PRIORITY.get(reason, 9) < _PRIORITY.get(found[0], 9):
                return reason, line[:200]
            return found
    return found


def _failure_text(found: tuple[str, str] | None) -> str | None:
    if found is None:
        return None
    reason, detail = found
    return f"{reason} ({detail})" if detail else reason


def failure_reason(lines: Iterable[object]) -> str | None:
    """The most likely reason a llama-server run failed, from its log (None if the log shows none)."""
    found: tuple[str, str] | None = None
    try:
        for line in _lines(lines):
            if line:
                low = line.lower()
                if _failure_hint(low):
                    found = _better_failure(found, line, low)
    except Exception:
        pass
    return _failure_text(found)


# ---------------------------------------------------------------- device order of a stored ledger

def without_endpoint(name: str) -> str:
    """A device name without its `[host:port]` (`RPC0[127.0.0.1:50052]` → `RPC0`): from the first `[` of its last
    line to a closing `]` at the end. String operations, not `\\[.*\\]$`, which is quadratic in a name of many `[`
    (names come from imported runs too)."""
    if not name.endswith("]"):
        return name
    i = name.find("[", name.rfind("\n") + 1)
    return name[:i] if i >= 0 else name


_NAME = re.compile(r"^(?P<base>[^\[\s(]+)\s*(?:[\[(](?P<inner>[^\])]*)[\])])?")


def _natural(s: str) -> list[tuple[int, str]]:
    """A natural sort key: `RPC10` after `RPC9` (numbers by value; text and numbers alternate, so a position holds
    the same kind in every key)."""
    return [(int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", s)]


def device_totals(ledger: dict[str, Any]) -> list[float]:
    """Each device's allocated MiB (every buffer kind) in llama.cpp's device order (`device_names`), from a stored
    ledger."""
    devs = ledger.get("devices") or {}
    return [float((devs.get(n) or {}).get("total_mib") or 0.0) for n in device_names(ledger)]


def device_names(ledger: dict[str, Any]) -> list[str]:
    """The ledger's device buffer names in llama.cpp's device order. Ledgers stored by older llamalab versions have
    sorted keys, so the order is taken from the memory breakdown table where it lists the devices
    (`RPC1 (127.0.0.1:50052)`, `CUDA0 (NVIDIA …)`; an rpc device matches by its endpoint, since every local
    rpc-server's device prints as RPC0[host:port]); names it does not list go by their number, then their stored
    order (the log's order in current ledgers)."""
    names = list(ledger.get("devices", {}))
    rows = [r.get("name") or "" for r in (ledger.get("breakdown_final") or ledger.get("breakdown_projected") or [])]
    if not rows:  # a log read before its exit-time table (a server still running): the device lines' order
        rows = [f"{n} ({d})" for n, d in (ledger.get("device_desc") or {}).items() if isinstance(d, str)]
    parsed = [_NAME.match(r.strip().lstrip("- ").strip()) for r in rows]

    def rank(name: str) -> int:
        m = _NAME.match(name)
        base, inner = (m.group("base"), m.group("inner")) if m else (name, None)
        for i, p in enumerate(parsed):
            if p is None:
                continue
            if inner and "[" in name:
                if p.group("inner") == inner:
                    return i
            elif p.group("base") == base:
                return i
        return 1 << 30

    # unlisted: llama.cpp numbers devices in order (CUDA0 < CUDA2 < CUDA10); equal bases keep the stored order
    return sorted(names, key=lambda n: (rank(n), _natural(without_endpoint(n)), names.index(n)))
