"""Why a llama.cpp process failed, in its own words: the most telling error line of a log (out of memory
first), never a guess. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from .rawlines import log_lines


def _has(pattern: str) -> Callable[[str], re.Match[str] | None]:
    return re.compile(pattern).search


def oom(low: str) -> bool:
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
# (test on the lower-cased line, reason); the first that matches a line names its failure
_FAILURES: list[tuple[Callable[[str], object], str]] = [
    (oom, "out of memory"),
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
    # the server's side of an rpc-server that died (its own log says why: runner reads it)
    (_has(r"remote rpc server crashed"), "an rpc-server crashed"),
    (_has(r"ggml_assert|segmentation fault|aborted|terminate called"), "llama.cpp crashed (assertion or signal)"),
]
# on the lower-cased line: every line a test of _FAILURES accepts has one of these words
# on the lower-cased line: every line a test of _FAILURES accepts has one of these words
_FAILURE_WORDS = ("fail", "error", "out of memory", "invalid", "unknown arg", "bind", "abort", "segmentation",
                  "terminate", "bad_alloc", "assert", "refused", "connect", "unable", "not a gguf", "already in use",
                  "crashed")


def failure_hint(low: str) -> bool:
    for w in _FAILURE_WORDS:
        if w in low:
            return True
    return False

# lines that mention a failure but are not one: pipeline parallelism's own fallback, fit's dry-run diagnostics
# lines that mention a failure but are not one: pipeline parallelism's own fallback, fit's dry-run diagnostics
_NOT_FAILURE = re.compile(r"retrying without pipeline parallelism|failed to fit params|for bugs during this step"
                          r"|failed to allocate host buffer for async uploads")


_PRIORITY = {"out of memory": 0, "the model file is not a GGUF file": 1}


def better_failure(found: tuple[str, str] | None, line: str, low: str) -> tuple[str, str] | None:
    """`found` (reason, line) or this line's failure where it ranks higher; the first of equal rank stays."""
    if _NOT_FAILURE.search(low):
        return found
    for test, reason in _FAILURES:
        if test(low):
            if found is None or _PRIORITY.get(reason, 9) < _PRIORITY.get(found[0], 9):
                return reason, line[:200]
            return found
    return found


def failure_text(found: tuple[str, str] | None) -> str | None:
    if found is None:
        return None
    reason, detail = found
    return f"{reason} ({detail})" if detail else reason


def failure_reason(lines: Iterable[object]) -> str | None:
    """The most likely reason a llama-server run failed, from its log (None if the log shows none)."""
    found: tuple[str, str] | None = None
    try:
        for line in log_lines(lines):
            if line:
                low = line.lower()
                if failure_hint(low):
                    found = better_failure(found, line, low)
    except Exception:
        pass
    return failure_text(found)

