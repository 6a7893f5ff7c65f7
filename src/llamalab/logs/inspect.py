"""`llamalab inspect`: a Ledger rendered as text or JSON [pure: returns strings and dicts, writes nothing]."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.safetext import plain
from . import memory
from .ledger import ONE_COPY, pp_label
from .records import BreakdownRow, Buffers, Ledger
from .tensorsplit import meta_note

COLUMNS = (("model", "model_mib"), ("KV", "kv_mib"), ("RS", "rs_mib"), ("compute", "compute_mib"),
           ("output", "output_mib"), ("input", "input_mib"))
OPTIONAL = {"RS": "rs_mib", "input": "input_mib"}  # columns shown only where some buffer has them


def inspect_json(led: Ledger) -> dict[str, Any]:
    """The ledger's JSON plus the one-copy estimate (`one_copy_saving`, null unless pipeline parallelism is on)."""
    out = led.to_json()
    saving = memory.one_copy_saving(led)
    out["one_copy_saving"] = saving.to_json() if saving else None
    per = memory.kv_bytes_per_token(led)
    out["kv_bytes_per_token"] = {k: round(v, 1) for k, v in per.items()}
    return out


def _mib(v: float | None) -> str:
    return "—" if v is None else f"{v:,.2f}"


def _tokens(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def buffer_table(led: Ledger) -> Table:
    """One row per device, then per host buffer type (CPU, CPU_Mapped, CPU_REPACK, AMX, CUDA_Host …): model / KV /
    (RS) / compute / output / (input) / total MiB."""
    bufs = (*led.devices.values(), *led.host.values())
    shown = {label for label, attr in OPTIONAL.items() if any(getattr(b, attr) for b in bufs)}
    cols = [c for c in COLUMNS if c[0] not in OPTIONAL or c[0] in shown]
    t = Table(title="Memory per buffer (MiB, as llama.cpp printed it)", title_justify="left")
    t.add_column("buffer")
    t.add_column("where")
    for label, _ in cols:
        t.add_column(label, justify="right")
    t.add_column("total", justify="right")

    def row(name: str, where: str, b: Buffers) -> None:
        t.add_row(name, where, *[_mib(getattr(b, attr)) for _, attr in cols], _mib(b.total()))

    for name, b in led.devices.items():
        row(name, "device", b)
    if len(led.devices) > 1:
        t.add_row("all devices", "", *[_mib(_sum(led.devices, attr)) for _, attr in cols],
                  _mib(round(sum(b.total() for b in led.devices.values()), 2)), style="bold")
    for name, b in led.host.items():
        row(name, "host", b)
    return t


def meta_lines(led: Ledger) -> list[str]:
    """-sm tensor: what llama.cpp printed for the Meta() device, and how the table's per-device rows were made."""
    if not led.meta:
        return []
    printed = "; ".join(f"{name}: " + ", ".join(f"{k[:-4]} {_mib(v)}" for k, v in figs.items() if v is not None)
                        for name, figs in led.meta.get("printed", {}).items())
    out = [f"Tensor split (-sm tensor): llama.cpp printed {printed} MiB (each the largest per-device part)"]
    note = meta_note(led.meta)
    if note:
        out.append("  " + note)
    return out


def _sum(table: dict[str, Buffers], attr: str) -> float | None:
    vals = [getattr(b, attr) for b in table.values() if getattr(b, attr) is not None]
    return round(sum(vals), 2) if vals else None


def pp_line(led: Ledger) -> str:
    """Pipeline parallelism's state in the vocabulary of every llamalab output (`ledger.pp_label`), and the
    evidence for it."""
    if led.pp_retry:
        asked = f" with n_copies={led.pp_enabled_copies}" if led.pp_enabled_copies else ""
        after = f"; it then ran with sched copies = {led.sched_copies}" if led.sched_copies is not None else ""
        return (f"Pipeline parallelism: DROPPED — llama.cpp set it up{asked}, its compute buffers did not fit "
                f"({led.pp_dropped_reason or 'no allocation failure printed'}), and it retried without pipeline "
                f"parallelism (\"compute buffer allocation failed, retrying without pipeline parallelism\"){after}. "
                "Whatever the build's copies, this configuration ran with pipeline parallelism off.")
    copies = led.sched_copies if led.sched_copies is not None else led.pp_enabled_copies
    if copies is not None:
        state = pp_label(led.pipeline_parallel, copies, led.pp_enabled_line)
        extra = (" — llama.cpp prints \"pipeline parallelism enabled\", but with one scheduler copy nothing is "
                 "overlapped and nothing extra allocated: in memory and speed it is as good as off"
                 if state == ONE_COPY else "")
        how = f"sched copies = {copies}" if led.sched_copies is not None else f"n_copies = {copies}"
        return f"Pipeline parallelism: {state}, {how}{extra}"
    if led.pp_enabled_line:
        return "Pipeline parallelism: on, copies not printed (llama.cpp's default is 4)"
    return ("Pipeline parallelism: unknown (the log prints neither \"pipeline parallelism enabled\" nor "
            "\"sched copies\")")


def context_lines(led: Ledger) -> list[str]:
    out = []
    if led.n_ctx is not None:
        parts = [f"n_ctx = {led.n_ctx:,}"]
        if led.n_ctx_seq is not None and led.n_ctx_seq != led.n_ctx:
            parts.append(f"{led.n_ctx_seq:,} per sequence")
        if led.n_seq_max:
            parts.append(f"{led.n_seq_max} sequence(s)")
        if led.n_ubatch:
            parts.append(f"n_ubatch = {led.n_ubatch}")
        if led.flash_attn is not None:
            parts.append("flash attention " + ("on" if led.flash_attn else "off"))
        if led.n_ctx_train:
            parts.append(f"n_ctx_train = {led.n_ctx_train:,}" + (" (this is the model's limit: no more context "
                                                                 "to gain)" if led.n_ctx >= led.n_ctx_train else ""))
        out.append("Context: " + ", ".join(parts))
    for c in led.kv_caches:
        kind = " (sliding window)" if c.swa else ""
        out.append(f"KV cache{kind}: {_mib(c.size_mib)} MiB, {_tokens(c.total_cells)} cells, {c.layers or '?'} layers, "
                   f"K {c.k_type or '?'}, V {c.v_type or '?'}")
    per = memory.total_kv_bytes_per_token(led)
    if per:
        out.append(f"KV per token of context: {per / 1024:,.1f} KiB over all buffers")
    out += fit_lines(led)
    if led.fit_args:
        out.append(f"llama-fit-params suggests: {led.fit_args}")
    if led.graph_nodes is not None or led.graph_splits is not None:
        tg = ""
        if led.graph_splits_tg is not None and led.graph_splits_tg != led.graph_splits:
            tg = f" ({led.graph_splits_tg} when generating)"
        out.append(f"Graph: {led.graph_nodes if led.graph_nodes is not None else '?'} nodes, "
                   f"{led.graph_splits if led.graph_splits is not None else '?'} splits{tg}")
    if led.layers_offloaded is not None:
        out.append(f"Layers offloaded: {led.layers_offloaded}/{led.layers_total}")
    return out


def fit_lines(led: Ledger) -> list[str]:
    """What llama.cpp's memory fit did, with its own verdict: a failed fit reads as failed."""
    failed = led.fit_status == "failed"
    if led.fit_ctx_from is not None or led.fit_ctx_to is not None:
        s = f"--fit: context size reduced from {_tokens(led.fit_ctx_from)} to {_tokens(led.fit_ctx_to)}"
        if failed:
            s += ("; then the fit FAILED (\"failed to fit params to free device memory\"): the context is the "
                  "reduced one, but the layers were not fitted to each device (llama.cpp does not move layers when "
                  "-ngl is given), so a device may hold more than its free memory")
        elif led.fit_status == "ok":
            s += " (fit succeeded)"
        return [s]
    if failed:
        return ["--fit: FAILED (\"failed to fit params to free device memory\"): llama.cpp went on with the "
                "parameters as given"]
    return []


def saving_lines(led: Ledger) -> list[str]:
    """The one-copy estimate, with its basis; empty unless pipeline parallelism is on."""
    s = memory.one_copy_saving(led)
    if s is None:
        return []
    per = ", ".join(f"{name} {_mib(mib)} MiB" for name, mib in s.per_device.items())
    if s.at_limit:
        tokens = (f"— but no more context: this log already runs the model's whole context (n_ctx_train "
                  f"{s.n_ctx_train:,})")
    elif s.tokens is not None:
        tokens = "≈ " + _tokens(s.tokens) + " more tokens of context" + (
            f" (the model's limit: n_ctx_train {s.n_ctx_train:,})" if s.capped else "")
    else:
        tokens = "(tokens of context: the log has no KV cache lines to price a token)"
    out = [f"ESTIMATED saving with one scheduler copy instead of {s.n_copies}: {per} {tokens}"]
    if s.low:
        rng = ", ".join(f"{name} {_mib(s.low[name])}–{_mib(s.high[name])}" for name in s.per_device)
        toks = "" if s.at_limit else f"; tokens {_tokens(s.tokens_low)}–{_tokens(s.tokens_high)}"
        out.append(f"  range per device (MiB): {rng}{toks}")
    else:
        out.append("  upper figure only: the log does not show the context size the copies' inputs scale with")
    if s.host_mib:
        out.append(f"  host (system RAM) compute: about {_mib(s.host_mib)} MiB less")
    out.append(f"  basis: {s.basis}")
    out.append("  how: rebuild with -DGGML_SCHED_MAX_COPIES=1 (only ggml-base changes), or, without rebuilding, turn "
               "pipeline parallelism off with the no-op override `-ot no_such_tensor=CPU` (measured: the same "
               "buffers as one copy). No runtime switch keeps the pipeline with one copy. This is an estimate: "
               "confirm with a copies=1 log, or `llamalab run pipeline-parallel --model …`.")
    return out


def render(led: Ledger, width: int = 110) -> str:
    """The human report for `llamalab inspect`."""
    buf = io.StringIO()
    # markup off: buffer names and failure lines come from the log (`[devices]`, `[/]` print as written)
    con = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False, soft_wrap=False,
                  markup=False, emoji=False)
    for item in [*_opening(led), *_also_read(led), pp_line(led), *_allocation_lines(led), *context_lines(led),
                 *saving_lines(led), *_closing(led)]:
        con.print(item)
    return plain(buf.getvalue())


def _opening(led: Ledger) -> list[str | Table]:
    """The report's start: the build, the failure, the buffer table (or why there is none) and the Meta() lines."""
    out: list[str | Table] = []
    if led.build:
        out.append(f"llama.cpp {led.build}")
    if led.failure and led.pp_retry and not led.context_failed:
        out.append(f"An allocation failed, and llama.cpp retried without pipeline parallelism: {led.failure}")
    elif led.failure:
        out.append(f"This run failed: {led.failure}")
    if led.devices or led.host:
        out.append(buffer_table(led))
    else:
        out.append("No buffer lines found. llama.cpp prints them at verbosity 4 (-lv 4); paste the log from the "
                   "start of the model load.")
    return out + meta_lines(led)


def _also_read(led: Ledger) -> list[str]:
    """What else the log held beside the table: an ollama log, a draft model, a multimodal projector, LoRAs."""
    out = []
    if led.wrapper == "ollama":
        out.append("Read from an ollama log: llama.cpp's lines (raw, or relayed in ollama's `msg=` records) and, where "
                   "ollama's own engine ran, its memory summaries (`model weights`, `kv cache`, `compute graph`), "
                   "which print sizes to 0.1 MiB/GiB.")
    if led.draft:
        out.append("Includes a draft model (speculative decoding): its buffers are added to the same devices.")
    if led.mmproj_compute:
        out.append("Multimodal projector compute (not in the table): "
                   + ", ".join(f"{k} {_mib(v)} MiB" for k, v in led.mmproj_compute.items()))
    if led.lora:
        out.append("LoRA adapters (not in the table): " + ", ".join(f"{k} {_mib(v)} MiB" for k, v in led.lora.items()))
    return out + _engine_lines(led)


def _engine_lines(led: Ledger) -> list[str]:
    """An ik_llama.cpp log: its own layer placement, and each figure its log has no line for (iklines.py)."""
    if led.engine is None:
        return []
    out = [f"Read from an {led.engine} log (its lines are llama.cpp's 2024 forms, plus its own placement)."]
    fit = led.engine_fit
    if fit is not None:
        where = ", ".join(f"layer {i} → device {d}" for i, d in enumerate(fit.layer_device))
        out.append(f"Its placement: margin {fit.margin_mib} MiB, model + cache need {fit.required_mib} MiB, devices "
                   f"offer {fit.available_mib} MiB less compute" + (f"; {where}" if where else "")
                   + (f"; {fit.failed}" if fit.failed else ""))
    out += [f"  not printed — {k}: {why}" for k, why in led.not_printed.items()]
    return out


def _allocation_lines(led: Ledger) -> list[str]:
    """Each buffer allocation that failed, and whether the context was created."""
    out = [f"Allocation failed: {f['buffer']} buffer of {_mib(f['mib'])} MiB" for f in led.alloc_failures]
    if led.context_failed:
        out.append("The context was not created (see the failure above).")
    return out


def _closing(led: Ledger) -> list[str | Table]:
    """llama.cpp's memory breakdowns (at exit, and --fit's projection), and how many loads the log holds."""
    out: list[str | Table] = []
    if led.breakdown_final:
        out.append(_breakdown(led.breakdown_final, "llama.cpp's memory breakdown at exit (MiB)"))
    if led.breakdown_projected:
        out.append(_breakdown(led.breakdown_projected, "projected by --fit with the initial parameters (MiB)"))
    if led.n_loads > 1:
        out.append(f"The log holds {led.n_loads} model loads; this is the last one.")
    return out


def _breakdown(rows: Sequence[BreakdownRow], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for c in ("device", "total", "free", "self", "model", "context", "compute", "unaccounted"):
        t.add_column(c, justify="left" if c == "device" else "right")
    for r in rows:
        t.add_row(r.name, *["" if v is None else f"{v:g}" for v in
                            (r.total, r.free, r.self_, r.model, r.context, r.compute, r.unaccounted)])
    return t
