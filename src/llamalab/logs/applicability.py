"""Whether an arm of a study applies to the rig it runs on [pure].

An arm that cannot run here is *not applicable*, which is not a failure of the run (exit code 3 is for
configurations that failed). Two sources say so:

- **The study**: an arm (`[[builds]]` or `[[settings]]`) with `min_devices = N` on a rig with fewer devices
  (`too_few_devices`): tensor and row split divide each layer across devices, and `-sm none` differs from the layer
  split only where there are several devices, so on one device there is nothing to compare. Such an arm is
  neither built nor started.
- **llama.cpp**: it refuses to load with one of its own messages that name what this rig, this build or this model
  lacks (`refusal`): row split on a backend without split buffers (in b11312 only SYCL and Hexagon have them, so
  CUDA, ROCm, Vulkan, Metal and RPC devices all refuse `-sm row`), tensor parallelism with no device but the CPU,
  tensor parallelism on a model architecture it does not implement it for. The configuration is tried once; its
  reason is llama.cpp's own words, and the run does not try it again.

And one part of an arm that does not apply: llama.cpp's `--fit` is not implemented for tensor split
(`fit_refusal`), so such a configuration runs with the context it was given (or the model's training context),
not one fitted to the memory budgets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NOT_APPLICABLE = "not-applicable"  # the status of a build or configuration that does not apply to the rig

MAX_LINE = 8192  # a log line is read up to here (the patterns are anchored on a keyword and bounded)

# llama.cpp's messages, each as b11312 prints it (src/llama-model.cpp, src/llama.cpp), and one an older release
# printed (the quantized-KV refusal of tensor split, before it was implemented). Group "said" is llama.cpp's words.
_REFUSALS: list[tuple[str, re.Pattern[str]]] = [
    ("split buffers", re.compile(r"(?P<said>device \S{1,200} does not support split buffers)")),
    ("SPLIT_MODE_TENSOR", re.compile(r"(?P<said>LLAMA_SPLIT_MODE_TENSOR needs >= 1 devices)")),
    ("SPLIT_MODE_TENSOR", re.compile(r"(?P<said>LLAMA_SPLIT_MODE_TENSOR not implemented for "
                                     r"(?:architecture '[^']{0,100}'|[^,\n]{1,200}))")),
    ("SPLIT_MODE_TENSOR", re.compile(r"(?P<said>simultaneous use of SPLIT_MODE_TENSOR and KV cache quantization "
                                     r"not implemented)")),
]

# common/fit.cpp: `failed to fit params to free device memory: <why>, abort`, where <why> says the mode has no fit
_FIT_REFUSALS: list[tuple[str, re.Pattern[str]]] = [
    ("SPLIT_MODE_TENSOR", re.compile(r"(?P<said>llama_params_fit is not implemented for SPLIT_MODE_TENSOR)")),
    ("LLAMA_SPLIT_MODE_ROW", re.compile(r"(?P<said>changing weight allocation for LLAMA_SPLIT_MODE_ROW not "
                                        r"implemented)")),
]


def _first(lines: Iterable[str | bytes], patterns: list[tuple[str, re.Pattern[str]]]) -> str | None:
    for raw in lines:
        line = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
        line = line[:MAX_LINE]
        for keyword, pattern in patterns:
            if keyword in line:
                m = pattern.search(line)
                if m:
                    return m.group("said")
    return None


def refusal(lines: Iterable[str | bytes]) -> str | None:
    """llama.cpp's own words where a log shows it refused the configuration for what the rig, the build or the
    model lacks (None where it shows no such refusal: then a server that died failed)."""
    return _first(lines, _REFUSALS)


def fit_refusal(lines: Iterable[str | bytes]) -> str | None:
    """llama.cpp's own words where its `--fit` says it is not implemented for the split mode asked for."""
    return _first(lines, _FIT_REFUSALS)


def too_few_devices(needed: int, have: int, backend: str) -> str | None:
    """llamalab's reason when an arm that needs `needed` devices meets a rig of `have` (None when it applies)."""
    if have >= needed:
        return None
    return (f"it needs at least {needed} devices and this rig has {have} ({backend}"
            + (", the host alone" if backend == "cpu" else "") + ")")
