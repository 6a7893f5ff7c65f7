"""`llamalab tune` on a header-only stand-in (a remote model without --download): stage one's answer, which is
dry runs alone — the verified front and llama.cpp's default — and why stage two did not run (pure)."""

from __future__ import annotations

from ..analysis import tune as rtune


def front_table(doc: dict) -> tuple[list[str], list[list[str]]]:
    """The front members stage two would run, each with its context and MiB per device (dry-run figures), and
    llama.cpp's default first."""
    devices = list((doc.get("rig") or {}).get("devices") or [])
    head = ["Config", "What", "Context", *[f"{d} MiB" for d in devices], "Arguments"]
    default = doc.get("default") or {}
    body = [["default", "llama.cpp's default (--fit, no flags)", f"{default.get('n_ctx') or 0:,}",
             *_mib(default.get("devices_mib"), len(devices)), " ".join(default.get("args") or []) or "(none)"]]
    for k, ch in enumerate(doc.get("chosen") or [], start=1):
        body.append([f"t{k:02d}", ch["label"], f"{ch['n_ctx']:,}", *_mib(ch.get("devices_mib"), len(devices)),
                     " ".join(ch["args"])])
    return head, body


def _mib(values, n: int) -> list[str]:
    vals = list(values or []) + [None] * n
    return [f"{v:,.0f}" if isinstance(v, (int, float)) else "–" for v in vals[:n]]


def lines(doc: dict) -> list[str]:
    """Stage one's counts and search space (report.analysis.tune's lines without stage two's)."""
    return [x for x in rtune.stage_lines(doc) if not x.startswith("stage two:")]


def why(doc: dict) -> str:
    return (f"the model ({(doc.get('model') or {}).get('path', '?')}) is a header-only stand-in, whose weights are "
            "a hole.")
