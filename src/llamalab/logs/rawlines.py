"""Log lines made plain before any pattern reads them: timestamps, level letters, `[pid]`, CRLF, ANSI colours,
JSONL wrapping (`--log-jsonl`), journald prefixes; ollama's logfmt records read as lines (`records`); a line longer
than `LONG_LINE` held as its two ends. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator

from .records import MIB

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|\^\[\[[0-9;]*m|\[[0-9]{1,2}(?:;[0-9]{1,2})*m")


_PREFIX = re.compile(r"\s*(?:\[\d+\]\s+)?\d+\.\d{2}\.\d{3}\.\d{3}\s+[DITWE]\s+")
# journald / syslog: `Jan 30 09:12:13 host ollama[5307]: `, `9月 02 14:46:54 host ollama[1756203]: `, `mai 17 …`, or
# journalctl -o short-iso's `2025-09-02T14:46:54+0800 host ollama[1756203]: `
# journald / syslog: `Jan 30 09:12:13 host ollama[5307]: `, `9月 02 14:46:54 host ollama[1756203]: `, `mai 17 …`, or
# journalctl -o short-iso's `2025-09-02T14:46:54+0800 host ollama[1756203]: `
_SYSLOG = re.compile(r"(?:[^\s\d]{1,12}|\d{1,2}月)\s{1,2}\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?"
                     r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?")


_SYSLOG_TAIL = re.compile(r"\s+[^\s\[\]]{1,255}\s+(?P<proc>[^\s\[\]:]{1,128})\[\d{1,10}\]:\s?")
# No line the ledger reads is longer than a few hundred characters; a longer one (a model name full of blanks,
# a paste with no newlines) keeps its first and last MAX_LINE/2 characters, so no line costs more than a bounded
# amount of matching.
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


OLLAMA_RECORD = "ollama-record:"  # how log_lines passes one of ollama's own memory records on to _line


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


def log_lines(raw_lines: Iterable[object], seen: dict[str, bool] | None = None) -> Iterable[str]:
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

