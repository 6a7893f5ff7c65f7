"""The seed-style table (reference/seed-study.md): one row per build × setting × trial."""

from __future__ import annotations

from ...core.safetext import md_prose
from ..data import RunData, compute_by_label, host_compute


def rows(data: RunData, concurrency: int = 1) -> list[dict]:
    """Rows of the table, in study order, at one concurrency level (single stream by default)."""
    return [r for _, r in _rows(data, concurrency)]


def rows_by_cell(data: RunData, concurrency: int = 1) -> dict[tuple[int, int], list[dict]]:
    """`rows`, grouped by workload cell (prompt, output tokens), the cells in order; made in one pass."""
    out: dict[tuple[int, int], list[dict]] = {}
    for cell, r in sorted(_rows(data, concurrency), key=lambda cr: cr[0]):  # stable: study order within a cell
        out.setdefault(cell, []).append(r)
    return out


def _rows(data: RunData, concurrency: int) -> list[tuple[tuple[int, int], dict]]:
    """(workload cell, row) of each trial at the level, in study order."""
    from .context import rows as context_rows
    from .outputs import cell as outputs_cell

    within = {(r["build"], r["setting"]): r for r in context_rows(data) if r.get("budget_fit") is not None}
    out = []
    for t in data.trials:
        if t["concurrency"] != concurrency:
            continue
        led = _ledger_of_config(data, t["config_id"]) or {}
        w = within.get((t["build"], t["setting"]))
        out.append((data.cell(t), {
            "build": t["build"],
            "setting": t["setting"],
            "trial": t["trial"],
            "concurrency": t["concurrency"],
            "input_tokens": t["input_tokens"],
            "input_tps": _r(t["input_tps"]),
            "output_tokens": t["output_tokens"],
            "output_tps": _r(t["output_tps"]),
            "compute_mib": compute_by_label(led) if led else {},
            "compute_host_mib": host_compute(led) if led else None,
            "n_ctx": led.get("n_ctx"),
            # where the run searched for it: the largest context within every device's budget (None: unknown)
            **({"within_budgets_n_ctx": w["n_ctx"]} if w is not None else {}),
            "copies": led.get("sched_copies"),
            "pipeline_parallel": led.get("pipeline_parallel"),
            "errors": t["errors"],
            "outputs": outputs_cell(data, t["build"], t["setting"]),
            # a build of another engine (ik_llama.cpp: no fit of the context; its context is llamalab's search)
            **({"engine": e} if (e := data.engine(t["build"])) != "llama.cpp" else {}),
        }))
    order = config_order(data)
    out.sort(key=lambda cr: (order.get((cr[1]["build"], cr[1]["setting"]), 1 << 30), cr[1]["trial"]))
    return out


def config_order(data: RunData) -> dict[tuple[str, str], int]:
    """Study order of the configurations: the study file's builds × settings, then any the store holds that it
    does not name (or all of them, in stored order, when the study file cannot be read)."""
    from .verdict import study_builds, study_settings

    b = study_builds(data) + [t["build"] for t in data.trials]
    s = study_settings(data) + [t["setting"] for t in data.trials]
    pairs = [(bb, ss) for bb in dict.fromkeys(b) for ss in dict.fromkeys(s)]
    return {k: i for i, k in enumerate(pairs)}


def _ledger_of_config(data: RunData, config_id: int) -> dict | None:
    for c in data.configs:
        if c["id"] == config_id:
            return c.get("ledger")
    return None


def _r(x, nd: int = 2):
    return None if x is None else round(float(x), nd)


def device_columns(rows_: list[dict]) -> list[str]:
    cols: list[str] = []
    for r in rows_:
        for k in r["compute_mib"]:
            if k not in cols:
                cols.append(k)
    return cols


HEADERS = ["Build", "Setting", "Trial", "Input tokens", "Input t/s", "Output tokens", "Output t/s"]


OUTPUTS_HEAD = "Outputs vs baseline"


def table_cells(rows_: list[dict]) -> tuple[list[str], list[list[str]]]:
    devs = device_columns(rows_)
    within = any("within_budgets_n_ctx" in r for r in rows_)
    fitted = "Context, llama.cpp's fit (tokens)" if not any("engine" in r for r in rows_) else \
        "Context, llama.cpp's fit or llamalab's search (tokens)"
    ctx_head = [fitted, "Context within budgets (tokens)"] if within else ["Context (tokens)"]
    head = HEADERS + [f"Compute {d} (MiB)" for d in devs] + ["Compute host (MiB)", *ctx_head, "Copies",
                                                             OUTPUTS_HEAD]
    body = []
    for r in rows_:
        body.append([
            r["build"], r["setting"], str(r["trial"]), format_cell(r["input_tokens"]), format_cell(r["input_tps"]),
            format_cell(r["output_tokens"]), format_cell(r["output_tps"]),
            *[format_cell(r["compute_mib"].get(d)) for d in devs],
            format_cell(r["compute_host_mib"]), format_cell(r["n_ctx"]),
            *([format_cell(r.get("within_budgets_n_ctx")) if r.get("within_budgets_n_ctx") else "unknown"] if within
              else []),
            format_cell(r["copies"]), r.get("outputs") or "not compared",
        ])
    return head, body


def memory_table(data: RunData) -> tuple[list[str], list[list[str]]]:
    """The original study's table, one row per configuration: compute per device and on the host (MiB), the
    context it ran with, its scheduler copies."""
    order = config_order(data)
    configs = sorted(data.ok_configs(), key=lambda c: order.get((c["build"], c["setting"]), 1 << 30))
    ledgers = [(c["build"], c["setting"], c["ledger"] or {}) for c in configs]
    devs = list(dict.fromkeys(d for _, _, led in ledgers for d in compute_by_label(led)))
    from .outputs import cell as outputs_cell

    head = ["Build", "Setting", *[f"Compute {d} (MiB)" for d in devs], "Compute host (MiB)", "Context (tokens)",
            "Copies", OUTPUTS_HEAD]
    body = [[b, s, *[format_cell(compute_by_label(led).get(d)) for d in devs], format_cell(host_compute(led)),
             format_cell(led.get("n_ctx")), format_cell(led.get("sched_copies")), outputs_cell(data, b, s)]
            for b, s, led in ledgers]
    return head, body


def format_cell(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    return str(v)


def markdown_table(head: list[str], body: list[list[str]]) -> str:
    def esc(s: str) -> str:  # no HTML, link or line break from a stored name (safetext.md_prose)
        return md_prose(s).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    return "\n".join(lines)
