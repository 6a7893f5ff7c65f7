r"""The patterns of llama.cpp's memory and structure lines, one per kind of line, and the line readers that the
ledger and the dry-run reader share. Pure.

Every pattern here runs in time linear in the line: no two unbounded quantifiers can trade characters (an optional
group between two runs of blanks takes the second run inside it: `(?:\(x\)\s*)?`, never `(?:\(x\))?\s*`), runs
that follow a keyword cannot contain the keyword, and what could be long is bounded ({0,256}).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Every pattern here runs in time linear in the line: no two unbounded quantifiers can trade characters (an optional
# group between two runs of blanks takes the second run inside it: `(?:\(x\)\s*)?`, never `(?:\(x\))?\s*`), runs
# that follow a keyword cannot contain the keyword, and what could be long is bounded ({0,256}).
# tests/logs/test_parse_bounds.py times every prefix of every keyword padded to just under MAX_LINE with each
# run. Where a pattern would need to look back from a keyword (buffer names, table rows), plain string operations do it.
NUM = r"(\d+(?:\.\d+)?)"


_BUF_TAIL = re.compile(r"buffer size\s*=\s*(\d+(?:\.\d+)?)\s*MiB")


_BUF_KINDS = {"model", "KV", "RS", "compute", "output", "input", "LoRA"}


_BUF_LOOKBACK = 512  # a buffer name is the word before `[kind] buffer size`, within this many characters


LEGACY = [  # late 2023 / early 2024, before ggml-backend buffer names
    (re.compile(r"VRAM used:\s*" + NUM + r"\s*MiB"), "GPU", "model"),
    (re.compile(r"\bmem required\s*=\s*" + NUM + r"\s*MiB"), "CPU", "model"),
    (re.compile(r"VRAM kv self\s*=\s*" + NUM + r"\s*MB"), "GPU", "kv"),
    (re.compile(r"VRAM scratch buffer:\s*" + NUM + r"\s*MiB"), "GPU", "compute"),
]


SCHED_COPIES = re.compile(r"sched copies\s*=\s*(\d+)")


PP = re.compile(r"pipeline parallelism enabled(?:\s*\(\s*n_copies\s*=\s*(\d+)\s*\))?")


PP_RETRY = re.compile(r"retrying without pipeline parallelism|compute buffer allocation failed, retrying")


ALLOC_FAIL = re.compile(r"failed to allocate compute (?:pp |tg )?buffers?|compute buffer allocation failed")


ALLOC_BUF = re.compile(r"failed to allocate (\S+) buffer of size (\d+)")


CTX_FAIL = re.compile(r"failed to (?:initialize|create) (?:the )?context|failed to allocate compute (?:pp|tg) buffers"
                       r"|unable to load model|error loading model")


GRAPH_NEW = re.compile(r"graph(?:\s*\(\s*pp bs\s*=\s*(\d+)\s*,\s*tg bs\s*=\s*(\d+)\s*\))?:\s*nodes\s*=\s*(\d+)"
                        r"(?:\s*/\s*(\d+))?\s*,\s*splits\s*=\s*(\d+)(?:\s*/\s*(\d+))?")


GRAPH_NODES = re.compile(r"graph nodes\s*=\s*(\d+)(?:\s*\(with bs=\d+\)\s*,\s*(\d+))?")
# `(measure)` takes the blanks after it with it: `\s*(?:\(measure\))?\s*` would let two runs of blanks trade
# characters (a line with 8,000 blanks after `graph splits` took 60 s per MB of log)
# `(measure)` takes the blanks after it with it: `\s*(?:\(measure\))?\s*` would let two runs of blanks trade
# characters (a line with 8,000 blanks after `graph splits` took 60 s per MB of log)
GRAPH_SPLITS = re.compile(r"graph splits\s*(?:\(measure\)\s*)?[=:]\s*(\d+)(?:\s*\(with bs=\d+\)\s*,\s*(\d+))?")


_CTX_FN = r"(?:llama_context|llama_new_context_with_model|llama_init_from_model)"


CTX_KEY = re.compile(_CTX_FN + r"\s*:\s+(n_ctx|n_ctx_per_seq|n_ctx_seq|n_seq_max|n_batch|n_ubatch|flash_attn"
                      r"|kv_unified)\s*=\s*(\S+)")


FA_AUTO = re.compile(r"Flash Attention was auto, set to (enabled|disabled)")


METADATA = ("llama_model_loader: - ", "print_info:", "llm_load_print_meta:")


META = re.compile(r"(?:print_info|llm_load_print_meta)\s*:\s+(n_embd|n_layer|n_ctx_train)\s*=\s*(\d+)\s*$")


OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# `size = …` (or `KV self size = …`) at the start of the line or after a blank or colon: checked by kv_sum_match
# (the optional `(…)` takes the blanks after it, for the same reason as GRAPH_SPLITS)
# `size = …` (or `KV self size = …`) at the start of the line or after a blank or colon: checked by kv_sum_match
# (the optional `(…)` takes the blanks after it, for the same reason as GRAPH_SPLITS)
_KV_SUM = re.compile(r"size\s*=\s*" + NUM + r"\s*MiB\s*(?:\((?P<inner>[^)]{0,256})\)\s*)?,\s*(?P<pairs>.*)$")


PAIR = re.compile(r"([^\s(]{1,32})\s*\((\w{1,32})\)\s*:\s*" + NUM + r"\s*MiB")


CELLS = re.compile(r"(?<!\d)(\d+)\s+cells")


LAYERS = re.compile(r"(?<!\d)(\d+)\s+layers")


SEQS = re.compile(r"(?<!\d)(\d+)\s*(?:/\s*(\d+))?\s+seqs")


KV_SIZE = re.compile(r"\bkv_size\s*=\s*(\d+)")


KV_TYPES = re.compile(r"type_k\s*=\s*'(\w{1,32})'\s*,\s*type_v\s*=\s*'(\w{1,32})'")


KV_NLAYER = re.compile(r"n_layer\s*=\s*(\d+)")


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


ISWA = re.compile(r"creating\s+(non-SWA|SWA)\s+KV cache")


FIT_REDUCED = re.compile(r"context size reduced from (\d+) to (\d+)")


FIT_START = re.compile(r"fitting params to (?:device|free) memory|getting device memory data|params_fit_impl")


FIT_OK = re.compile(r"successfully fit params")


FIT_END = re.compile(r"fitting params to free memory took|params_fit: (?:successfully|failed)"
                      r"|fit_params: (?:successfully|failed)")


FIT_FAILED = re.compile(r"failed to fit (?:params|CLI arguments)")


FIT_ARGS_HEAD = re.compile(r"(?:printing|Printing) fitted CLI arguments")


_BREAKDOWN_HEAD = re.compile(r"memory breakdown \[MiB\]")
# linear in the line: the description is at most 512 characters (and stripped), the name at most 128
# linear in the line: the description is at most 512 characters (and stripped), the name at most 128
_DEVICE_LINE = re.compile(r"\s*+(?:-\s+)?(?P<name>[A-Za-z][\w.\-]{0,127})\s*:\s*+(?P<desc>.{0,512}?)"
                          r"\((?P<total>\d+) MiB,\s*(?P<free>\d+) MiB free\)")


BUILD = re.compile(r"\bbuild(?:\s*=|:)?\s*(\d+)\s*\((\w{1,64})\)")


DRAFT = re.compile(r"draft (?:model|context)|mtp draft")  # on the lower-cased line


META_DEVICE = re.compile(r"creating a Meta device (?:for tensor parallelism )?(?:from|with) (\d+) devices")


META_MEMBER = re.compile(r"- device (\d+): (?P<name>[^\s(]{1,128})(?:\s+\((?P<desc>[^()]{0,256})\))?")


ENDPOINT_DESC = re.compile(r"^\[?[\w.:-]{1,200}\]?:\d{1,5}$")


MMPROJ = re.compile(r"(?:compute_meta|clip_\w{1,64}|mtmd_\w{1,64})\s*:")


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


def kv_sum_match(line: str) -> re.Match[str] | None:
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
    m = kv_sum_match(line) if "size" in line else None
    pairs = PAIR.findall(m.group("pairs")) if m else []
    if not m or not pairs:
        return None
    first = pairs[0][0].upper()
    kind = "rs" if first.startswith(("R", "S")) and not first.startswith("K") else "kv"
    inner = m.group("inner") or ""
    cells, layers = CELLS.search(inner), LAYERS.search(inner)
    return (kind, float(m.group(1)), int(cells.group(1)) if cells else None,
            int(layers.group(1)) if layers else None)


def context_value(line: str) -> tuple[str, str] | None:
    """(key, value as printed) of a context's `llama_context: KEY = VALUE` line (n_ctx, n_ctx_per_seq, n_ctx_seq,
    n_seq_max, n_batch, n_ubatch, flash_attn, kv_unified)."""
    m = CTX_KEY.search(line)
    return (m.group(1), m.group(2)) if m else None


def model_shape(line: str) -> tuple[str, int] | None:
    """(n_embd | n_layer | n_ctx_train, value) of the model's `print_info: KEY = N` line."""
    m = META.search(line) if ("print_info" in line or "llm_load_print_meta" in line) else None
    return (m.group(1), int(m.group(2))) if m else None


def sched_copies(line: str) -> int | None:
    """N of the scheduler's `sched copies = N`."""
    m = SCHED_COPIES.search(line) if "sched copies" in line else None
    return int(m.group(1)) if m else None


def graph_splits(line: str) -> int | None:
    """S of `graph[ (pp bs=…, tg bs=…)]: nodes = N[ / M], splits = S[ / T]` (the prompt graph's splits)."""
    m = GRAPH_NEW.search(line) if "graph" in line else None
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

