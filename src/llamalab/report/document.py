"""The JSON report: every stored figure of a run, nested the way people read it, plus what the renderers derive.

Stored rows keep their column names, except that a `*_json` column appears decoded (by `report.data`, once) under
its name without the suffix (`requests_json` → `requests`). Each configuration carries its `ledger` (the whole
stored ledger) and its `buffers` rows. `tables_of` turns a report back into the stored rows, so a test can check
nothing was lost.
Any other table of the run (`crosschecks`, …) appears top-level under its name, one readable row per stored row.
Derived parts: `rows` (the seed table, every concurrency level), `throughput`, `comparisons`, `memory`, `context`
(fitted context per configuration, predicted vs measured difference), `decision_table` (per setting: the rows by
use), `pp_gain` (pipeline parallelism's gain per workload cell and the crossover sentence), `not_applicable` (each arm
that does not apply to the rig, once, with llama.cpp's or llamalab's reason), `recommendation`, `answer` and, for a
tune run, `tune` (the pick the run stored, its reason and command, the front measured).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .analysis import context, grid, outputs, recommend, speed, summary, tables, verdict, versions
from .data import RunData, dumps, readable  # a row as the report shows it: each `x_json` under `x`

FORMAT = "llamalab-report"
VERSION = 1
SUFFIX = "_json"


def stored(row: dict, columns: list[str]) -> dict:
    """The inverse of `readable` for a table with these columns."""
    out = {}
    for c in columns:
        if c.endswith(SUFFIX):
            v = row.get(c[: -len(SUFFIX)])
            out[c] = None if v is None else json.dumps(v, sort_keys=True, default=str)
        elif c in row:
            out[c] = row[c]
    return out


def levels(data: RunData) -> list[int]:
    return sorted({int(t["concurrency"]) for t in data.trials})


def all_rows(data: RunData) -> Iterator[dict]:
    """The seed table at every concurrency level, single stream first (one level's rows at a time)."""
    for level in levels(data):
        yield from tables.rows(data, level)


def configs_of(data: RunData) -> list[dict]:
    """Every stored configuration row, readable, each with its `ledger` (or None) and its `buffers` rows."""
    t = data.tables
    if not t:  # a RunData made by hand, not loaded from a store
        return [{**c, "buffers": c.get("buffers", [])} for c in data.configs]
    ledgers = {r["config_id"]: readable(r) for r in t.get("ledgers", [])}
    buffers: dict[int, list[dict]] = {}
    for b in t.get("buffers", []):
        buffers.setdefault(b["config_id"], []).append({k: v for k, v in b.items() if k != "config_id"})
    configs = []
    for c in t.get("configs", []):
        c = readable(c)
        led = ledgers.get(c["id"])
        c["ledger"] = led["ledger"] if led else None
        c["buffers"] = buffers.get(c["id"], [])
        configs.append(c)
    return configs


def trials_of(data: RunData) -> Iterable[Mapping[str, Any]]:
    """Every stored trial row, readable (`requests` decoded), in their order: `RunData.trials`, or, for a run loaded
    with only its requests' figures, the rows read again from the store one at a time (`RunData.stored_trials`)."""
    if data.tables and "trials" in data.tables:  # a RunData made by hand from a dump
        return [readable(x) for x in data.tables["trials"]]
    if not data.has_requests:
        if data.stored_trials is None:
            raise ValueError("this run was loaded without its requests (report.data.load(requests=False)); "
                             "JSON and CSV print every request")
        return data.stored_trials()
    return data.trials


# Tables the report nests or reshapes; any other table of a run (crosschecks, …) appears top-level under its own
# name, one readable row per stored row.
NESTED = ("runs", "system_info", "builds", "configs", "ledgers", "buffers", "trials")


# Tables of one kind of run, shown only where the run has rows in them (a tune's decision): every other run's report
# stays as it was before the table existed.
ONLY_WHERE_STORED = ("tune_picks", "outputs", "output_logits")


def other_tables(data: RunData) -> dict[str, list[dict]]:
    return {name: [readable(r) for r in rows] for name, rows in data.tables.items()
            if name not in NESTED and (rows or name not in ONLY_WHERE_STORED)}


# the parts of the JSON report with a row per trial: streamed by `pieces`
STREAMED = ("trials", "rows")


def document(data: RunData, *, seed: int = 0) -> dict:
    """The JSON report as one dict (every trial in it: see `pieces` for a run too large to hold twice)."""
    doc = _document(data, seed)
    for k in STREAMED:
        doc[k] = list(doc[k])
    return doc


def pieces(data: RunData, *, seed: int = 0) -> Iterator[str]:
    """The JSON report's text (`data.dumps(document(data)) + "\\n"`, the same value), in pieces: the parts with a
    row per trial (`STREAMED`) are written one row at a time, as they are made."""
    doc = _document(data, seed)
    parts: list[str] = []  # what is written so far of the current piece
    pending: dict = {}

    def flush() -> None:
        if pending:
            parts.append(dumps(pending)[2:-2])  # its keys, without the braces
            pending.clear()

    first = True
    for k, v in doc.items():
        if k not in STREAMED:
            pending[k] = v
            continue
        flush()
        parts.append(f"{dumps(k)}: [")
        head = ",\n".join(parts[:-1])
        yield ("{\n" if first else ",\n") + head + (",\n  " if head else "  ") + parts[-1]
        first, parts = False, []
        empty = True
        buf: list[str] = []
        for item in v:
            buf.append(("\n    " if empty else ",\n    ") + dumps(item).replace("\n", "\n    "))
            empty = False
            if len(buf) >= 256:
                yield "".join(buf)
                buf = []
        yield "".join(buf) + ("]" if empty else "\n  ]")
    flush()
    rest = ",\n".join(parts)
    yield ("{\n" if first else ",\n" if rest else "") + rest + "\n}\n"


def _document(data: RunData, seed: int) -> dict:
    t = data.tables
    system = t.get("system_info") or []
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "run": readable(t["runs"][0]) if t.get("runs") else readable(data.run),
        "system": readable(system[0])["info"] if system else data.system,
        "builds": [readable(b) for b in t.get("builds", data.builds)],
        "configs": configs_of(data),
        "trials": trials_of(data),
        "rows": all_rows(data),
        "throughput": speed.throughput_table(data),
        "comparisons": speed.comparisons(data, seed=seed),
        "memory": verdict.memory_comparisons(data),
        "memory_notes": summary.ledger_notes(data),
        "context": context.rows(data),
        "versions": versions.rows(data) if versions.applies(data) else [],
        "decision_table": {s: [r.as_json() for r in recommend.decision_table(data, s)]
                           for s in verdict.study_settings(data)},
        "pp_gain": _pp_gain(data, seed),
        "not_applicable": summary.not_applicable(data),
        "recommendation": recommend.recommendation(data),
        "answer": _answer(data),
        "outputs_vs_baseline": outputs.as_json(data),
    }
    tune = _tune(data)
    if tune is not None:
        doc["tune"] = tune
    for name, rows in other_tables(data).items():
        if name in doc:
            raise ValueError(f"table {name!r} collides with a part of the JSON report")
        doc[name] = rows
    return doc


def _answer(data: RunData) -> dict:
    """What the report opens with: the answer's sentences (at most two, 60 words), its command and build; for a
    tune run, as in Markdown and HTML, the pick the run stored and its command."""
    from .analysis import answer, tune

    v = tune.view(data)
    if v is not None:
        return {"text": v.pick_sentence, "command": v.command, "build": v.pick.name}
    a = answer.answer(data)
    return {"text": a.text, "command": a.command or None, "build": a.build}


def _tune(data: RunData) -> dict | None:
    """A tune run: the pick as the run decided it (its reason, command, what was left open) and the front measured,
    as `llamalab tune --json` prints it (None for any other run)."""
    from .analysis import tune

    v = tune.view(data)
    if v is None:
        return None
    out = tune.as_json(v)
    out.pop("search", None)  # the stored search is under `tunes`
    return out


def _pp_gain(data: RunData, seed: int) -> dict | None:
    p = grid.pair(data)
    if p is None:
        return None
    rows = grid.gains(data, p, seed=seed)
    return {"setting": p.setting, "pipeline": p.pp, "no_pipeline": p.no_pp, "copies": p.copies, "cells": rows,
            "sentence": grid.crossover(data, rows, p)}


def ledger_row(config_id: int, ledger: dict) -> dict:
    """The `ledgers` row the store keeps for a ledger (its scalar columns copy the ledger's own figures)."""
    pp = ledger.get("pipeline_parallel")
    return {"config_id": config_id, "pipeline_parallel": None if pp is None else int(pp),
            "sched_copies": ledger.get("sched_copies"), "n_ctx": ledger.get("n_ctx"),
            "graph_splits": ledger.get("graph_splits"), "ledger": ledger}


def tables_of(doc: dict, columns: dict[str, list[str]]) -> dict[str, list[dict]]:
    """The stored rows a report was made from (`columns`: each table's columns, from Store.columns)."""
    run_id = doc["run"]["id"]
    out: dict[str, list[dict]] = {
        "runs": [stored(doc["run"], columns["runs"])],
        "system_info": ([stored({"run_id": run_id, "info": doc["system"]}, columns["system_info"])]
                        if doc.get("system") is not None else []),
        "builds": [stored(b, columns["builds"]) for b in doc["builds"]],
        "configs": [], "ledgers": [], "buffers": [],
        "trials": [stored(x, columns["trials"]) for x in doc["trials"]],
    }
    for c in doc["configs"]:
        out["configs"].append(stored(c, columns["configs"]))
        if c.get("ledger") is not None:
            out["ledgers"].append(stored(ledger_row(c["id"], c["ledger"]), columns["ledgers"]))
        out["buffers"] += [stored({**b, "config_id": c["id"]}, columns["buffers"]) for b in c.get("buffers", [])]
    for name, cols in columns.items():
        if name not in NESTED:
            out[name] = [stored(r, cols) for r in doc.get(name, [])]
    return out
