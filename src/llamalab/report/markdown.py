"""The Markdown report: ready to paste into a forum post or a GitHub issue."""

from __future__ import annotations

from . import tables, verdict
from .data import RunData


def render(data: RunData) -> str:
    r = data.run
    out = [f"# llamalab: {r['study']} — run {r['id']}", ""]
    sysinfo = data.system or {}
    src = (sysinfo.get("llama_cpp") or {})
    out.append(f"- llama.cpp {src.get('version', '?')} ({(src.get('commit') or '?')[:9]}), from {src.get('origin', '?')}")
    gpus = ", ".join(f"{g['name']} ({g['total_mib']:,} MiB)" for g in sysinfo.get("gpus") or []) or "none"
    out.append(f"- machine: {sysinfo.get('cpu', '?')}, {sysinfo.get('cores', '?')} cores, "
               f"{sysinfo.get('ram_mib') or 0:,} MiB RAM; GPUs: {gpus}")
    out.append(f"- status: {r['status']}, started {r['started']}")
    out.append("")
    rows = tables.rows(data, 1)
    head, body = tables.table_cells(rows)
    out.append(tables.markdown_table(head, body))
    out.append("")
    skipped = [b for b in data.builds if b["status"] != "ok"]
    failed = [c for c in data.configs if c["status"] == "failed"]
    if skipped or failed:
        out.append("## Not measured")
        out.append("")
        for b in skipped:
            out.append(f"- build {b['name']}: {b['status']} — {b['reason']}")
        for c in failed:
            first = (c["reason"] or "").splitlines()[0] if c["reason"] else "unknown reason"
            out.append(f"- {c['build']} × {c['setting']}: failed — {first}")
        out.append("")
    sentences = verdict.memory_sentences(data)
    if sentences:
        out.append("## Memory")
        out.append("")
        out += [f"- {s}" for s in sentences]
        out.append("")
    out.append("Compute buffers are llama.cpp's own `compute buffer size` lines (MiB); context is the `n_ctx` "
               "the server ran with.")
    return "\n".join(out) + "\n"
