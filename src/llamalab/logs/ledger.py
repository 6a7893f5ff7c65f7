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

ik_llama.cpp's logs are read the same way (its memory lines are llama.cpp's 2024 forms); the lines only it prints
and the figures its log has no line for are iklines.py's.

Why one module of ~700 lines: the state machine that turns a load's lines into one `Ledger` is one pass whose
steps share its state (`_State`) and order (a new load, a new context, a re-reserve); its records, line cleanup,
patterns, `-sm tensor` attribution, failures and device order are apart (logs/records.py, rawlines.py,
patterns.py, tensorsplit.py, failures.py, order.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import iklines
from .failures import better_failure, failure_hint, failure_text, oom
from .patterns import (
    ALLOC_BUF,
    ALLOC_FAIL,
    BUILD,
    CELLS,
    CTX_FAIL,
    CTX_KEY,
    DRAFT,
    FA_AUTO,
    FIT_ARGS_HEAD,
    FIT_END,
    FIT_FAILED,
    FIT_OK,
    FIT_REDUCED,
    FIT_START,
    GRAPH_NEW,
    GRAPH_NODES,
    GRAPH_SPLITS,
    ISWA,
    KV_NLAYER,
    KV_SIZE,
    KV_TYPES,
    LAYERS,
    LEGACY,
    MAX_DRAFTS,
    MAX_ERRORS,
    MAX_TABLE_ROWS,
    MAX_TABLES,
    META,
    META_DEVICE,
    META_MEMBER,
    METADATA,
    MMPROJ,
    OFFLOADED,
    PAIR,
    PP,
    PP_RETRY,
    SCHED_COPIES,
    SEQS,
    breakdown_row,
    buffers,
    device_line,
    kv_sum_match,
    numbers,
)
from .rawlines import OLLAMA_RECORD, is_host, log_lines
from .records import MIB, BreakdownRow, Buffers, KvSummary, Ledger
from .tensorsplit import member_name, split_meta


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
    ik: iklines.IkState = field(default_factory=iklines.IkState)  # ik_llama.cpp's own lines (iklines.py)

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
        for line in log_lines(lines, seen):
            if not line:
                continue
            try:
                ctxs = st.ctxs
                was_ended = bool(ctxs) and ctxs[-1].ended
                if line.startswith(METADATA):  # the model's metadata echoed: never a failure, whatever it says
                    _metadata_line(st, line)
                    continue
                low = line.lower()
                _line(st, line, low)
                if failure_hint(low):
                    failure = better_failure(failure, line, low)
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
        led.failure = failure_text(failure)
    except Exception as e:
        led.errors.append(f"{type(e).__name__}: {e}")
    try:
        if seen.get("ollama"):
            led.wrapper = "ollama"
        _ollama_finish(st)
        iklines.finish(st.ik, led)
        split_meta(led, st.meta_members, tensor_split)
    except Exception as e:
        led.errors.append(f"{type(e).__name__}: {e}")
    return led


def _metadata_line(st: _State, line: str) -> None:
    """The model's own metadata echoed (its name, tokenizer, chat template): never one of llama.cpp's messages,
    whatever text the model file put there. Only the shape (n_embd, n_layer, n_ctx_train) is read; the line ends a
    breakdown table."""
    st.breakdown = None
    if not line.startswith("llama_model_loader") and (m := META.match(line)) and not st.draft_mode:
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
    if (_structure_line(st, line, low) or iklines.read(st.ik, line) or _buffer_line(st, line)
            or _context_line(st, line) or _pipeline_line(st, line, low)):
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
    if line.startswith(METADATA):
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
    if (fit or "getting device memory" in line) and FIT_START.search(line) and not st.fit_phase:
        st.fit_phase = True
        if st.any_context():  # a new run's fit: what the previous run projected no longer applies
            led.breakdown_projected_tables = []
            led.fit_ctx_from = led.fit_ctx_to = led.fit_status = None
    if "draft" in low and DRAFT.search(low):
        st.draft_mode = True
    if "Meta device" in line and (m := META_DEVICE.search(line)):
        st.meta_expect, st.meta_members = min(int(m.group(1)), MAX_TABLE_ROWS), []
        return True
    if st.meta_expect and "- device" in line and (m := META_MEMBER.search(line)):
        st.meta_expect -= 1
        st.meta_members.append(member_name(m.group("name"), m.group("desc")))
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
        for pat, name, kind in LEGACY:
            if m := pat.search(line):
                _add_buffer(st, line, name, kind, float(m.group(1)))
                return True

    if "size" in line:
        if (m := kv_sum_match(line)) and _kv_summary(st, line, m):
            return True
        if m := KV_SIZE.search(line):
            c = st.ctx_for_context_line()
            types = KV_TYPES.search(line)
            nl = KV_NLAYER.search(line)
            c.kv_size = (int(m.group(1)), types.group(1) if types else None, types.group(2) if types else None,
                         int(nl.group(1)) if nl else None)
    if "KV cache" in line and (m := ISWA.search(line)):
        st.ctx_for_context_line().pending_swa = m.group(1) == "SWA"
    return False


def _context_line(st: _State, line: str) -> bool:
    """A context's scalars (n_ctx, n_seq_max, flash attention, …) and the model's (n_embd, n_layer, n_ctx_train)."""
    led = st.led
    if ("llama_context" in line or "llama_new_context" in line or "llama_init_from_model" in line) \
            and (m := CTX_KEY.search(line)):
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
    if "Flash Attention" in line and (m := FA_AUTO.search(line)):
        st.ctx().scalars["flash_attn"] = m.group(1) == "enabled"
    if ("print_info" in line or "llm_load_print_meta" in line) and (m := META.search(line)):  # behind a prefix
        key, val = m.group(1), int(m.group(2))
        if not st.draft_mode:
            setattr(led, key, val)
        return True
    return False


def _pipeline_line(st: _State, line: str, low: str) -> bool:
    """Pipeline parallelism (enabled, retried without), allocation failures, graph nodes and splits, scheduler
    copies."""
    if "pipeline parallelism enabled" in line and (m := PP.search(line)):
        c = st.ctx()
        c.scalars["pp_enabled_line"] = True
        if m.group(1):
            c.scalars["pp_enabled_copies"] = int(m.group(1))
        return True
    retry = "retrying" in line and bool(PP_RETRY.search(line))
    if retry:
        c = st.ctx()
        c.scalars["pp_retry"] = True
        c.scalars.setdefault("pp_dropped_reason", st.alloc_fail_line)
        st.alloc_fail_line = None
        c.compute.clear()
        c.pass_open = False
    elif st.alloc_fail_line is None and ("fail" in low or "out of memory" in low) and oom(low):
        st.alloc_fail_line = line[:240]  # what did not fit, should llama.cpp retry without pipeline parallelism
    if "fail" in line:
        if ALLOC_FAIL.search(line):
            st.ctx().scalars["compute_alloc_failed"] = True
        if m := ALLOC_BUF.search(line):
            failures = st.ctx().scalars.setdefault("alloc_failures", [])
            if isinstance(failures, list) and len(failures) < MAX_TABLE_ROWS:
                failures.append({"buffer": m.group(1), "mib": round(int(m.group(2)) / MIB, 2)})
    if (("fail" in line or "load model" in line or "loading model" in line) and CTX_FAIL.search(line)
            and st.ctxs and not retry):
        c = st.ctx()
        if c.started or "context" in line or "compute" in line:
            c.failed = True
            c.pass_open = False
    if "graph" in line:
        _graph_line(st, line)
    if "sched copies" in line and (m := SCHED_COPIES.search(line)):
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
    if m := GRAPH_NEW.search(line):
        c = st.ctx()
        c.scalars["graph_nodes"], c.scalars["graph_splits"] = int(m.group(3)), int(m.group(5))
        c.scalars["graph_nodes_tg"] = int(m.group(4)) if m.group(4) else int(m.group(3))
        c.scalars["graph_splits_tg"] = int(m.group(6)) if m.group(6) else int(m.group(5))
        c.ended, c.pass_open = True, False
        return
    if m := GRAPH_NODES.search(line):
        c = st.ctx()
        c.scalars["graph_nodes"] = int(m.group(1))
        c.scalars["graph_nodes_tg"] = int(m.group(2)) if m.group(2) else int(m.group(1))
        c.pass_open = False
    if m := GRAPH_SPLITS.search(line):
        c = st.ctx()
        c.scalars["graph_splits"] = int(m.group(1))
        c.scalars["graph_splits_tg"] = int(m.group(2)) if m.group(2) else int(m.group(1))
        c.ended, c.pass_open = True, False


def _fit_line(st: _State, line: str) -> None:
    """Layers offloaded, the fit's context and outcome, device memory, the build."""
    led = st.led
    fit = "fit" in line
    if "offloaded" in line and (m := OFFLOADED.search(line)):
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
        elif FIT_FAILED.search(line):
            led.fit_status = "failed"
        if FIT_END.search(line):
            st.fit_phase = False
        if FIT_ARGS_HEAD.search(line):
            st.fit_args_next = True
    if "MiB free)" in line and (dm := device_line(line)):
        led.device_memory[dm[0]] = (dm[2], dm[3])
        if len(led.device_desc) < MAX_TABLE_ROWS:
            led.device_desc.setdefault(dm[0], dm[1][:512])
    if led.build is None and "build" in line and (m := BUILD.search(line)):
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
    if MMPROJ.search(line):  # the multimodal projector (clip): its own model and compute buffers
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
    pairs = PAIR.findall(m.group("pairs"))
    if not pairs:
        return False
    inner = m.group("inner") or ""
    first = pairs[0][0].upper()
    kind = "rs" if first.startswith(("R", "S")) and not first.startswith("K") else "kv"
    c = st.ctx_for_context_line()
    s = KvSummary(size_mib=float(m.group(1)), kind=kind)
    if cm := CELLS.search(inner):
        s.cells = int(cm.group(1))
    if lm := LAYERS.search(inner):
        s.layers = int(lm.group(1))
    if sm := SEQS.search(inner):
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

