"""CSV reports: two tables that together hold every stored figure of a run.

`trials_csv`: one row per trial × request. The trial's stored columns come first (`id`, `run_id`, `config_id`,
`build`, `setting`, `trial`, `concurrency`, tokens and speeds, `wall_s`, aggregates, `errors`, `started`), then the
request's figures as `request.<name>` (`request.index`, `request.prompt_n`, … `request.itl_ms` as a JSON list).
Empty cell: no value. Floats are written in full (Python's repr), so they read back to the same number.

`configs_csv`: long format, one row per configuration × figure: `config_id, build, setting, path, value`, where
`path` is a JSON pointer into the configuration as the JSON report shows it (`/status`, `/load_seconds`,
`/ledger/devices/CUDA0/compute_mib`, `/ledger/kv/k_type`, `/buffers/0/compute_mib`, …) and `value` is JSON.
The run's other tables follow with an empty `config_id` (`/crosschecks/0/result/output_tps/llama_bench`, …).

`parse_trials` and `parse_configs` read them back (the round trip the tests check).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import fields

from ..core.records import RequestResult
from ..core.safetext import plain
from .data import RunData
from .document import configs_of, other_tables, trials_of

REQ = "request."
TEXT = {"run_id", "build", "setting", f"{REQ}stop_type", f"{REQ}error"}
JSON_CELLS = {f"{REQ}itl_ms"}
_INT = re.compile(r"^-?\d+$")
TRIAL_COLUMNS = ("id", "run_id", "config_id", "build", "setting", "trial", "concurrency", "input_tokens", "input_tps",
                 "output_tokens", "output_tps", "wall_s", "aggregate_output_tps", "aggregate_total_tps", "errors",
                 "started", "foreign_load", "cell_prompt_tokens", "cell_output_tokens")


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return str(v)


def _value(col: str, s: str):
    if s == "":
        return None
    if col in TEXT:
        return s
    if col in JSON_CELLS:
        return json.loads(s)
    if _INT.match(s):
        return int(s)
    try:
        return float(s)
    except ValueError:
        return s


def _write(header: list[str] | None, rows: list[list[str]]) -> str:
    """The CSV text; every cell `safetext.plain` (labels, reasons and errors come from study files, logs and imported
    runs: no terminal control sequence reaches a terminal that shows the file, or `report --format csv` itself)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header is not None:
        w.writerow([plain(c) for c in header])
    w.writerows([plain(c) for c in row] for row in rows)
    return buf.getvalue()


# ---------------------------------------------------------------- trials × requests

def trials_csv(data: RunData) -> str:
    return "".join(trials_pieces(data))


def trials_pieces(data: RunData) -> Iterator[str]:
    """The trials CSV in pieces: the trials are read twice, one at a time (their columns first, then their rows),
    so that a run of 128,000 trials is never held as rows of text."""
    tcols: list[str] = []
    rkeys: list[str] = []
    n = 0
    for t in trials_of(data):
        n += 1
        for k in t:
            if k != "requests" and k not in tcols:
                tcols.append(k)
        for r in t.get("requests") or []:
            for k in r:
                if k not in rkeys:
                    rkeys.append(k)
    if not n:  # still say what the columns are
        tcols = list(TRIAL_COLUMNS)
        rkeys = [f.name for f in fields(RequestResult)]
    yield _write([*tcols, *(REQ + k for k in rkeys)], [])
    body: list[list[str]] = []
    for t in trials_of(data) if n else ():
        head = [_cell(t.get(c)) for c in tcols]
        reqs = t.get("requests") or []
        if not reqs:
            body.append(head + [""] * len(rkeys))
        for r in reqs:
            body.append(head + [_cell(r.get(k)) for k in rkeys])
        if len(body) >= 1024:
            yield _write(None, body)
            body = []
    if body:
        yield _write(None, body)


def parse_trials(text: str) -> list[dict]:
    """Trials with their requests, as the JSON report shows them (a trial with no request has `requests: []`)."""
    out: list[dict] = []
    by_id: dict = {}
    for row in csv.DictReader(io.StringIO(text)):
        t = {k: _value(k, v) for k, v in row.items() if not k.startswith(REQ)}
        key = t.get("id")
        if key not in by_id:
            t["requests"] = []
            by_id[key] = t
            out.append(t)
        r = {k[len(REQ):]: _value(k, v) for k, v in row.items() if k.startswith(REQ)}
        if r.get("index") is not None:
            by_id[key]["requests"].append(r)
    return out


# ---------------------------------------------------------------- configurations, ledgers, buffers

def _escape(key) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def flatten(value, path: str = "") -> list[tuple[str, object]]:
    """(JSON pointer, leaf) pairs; an empty list or object is a leaf of its own."""
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in flatten(v, f"{path}/{_escape(k)}")]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in flatten(v, f"{path}/{i}")]
    return [(path, value)]


def unflatten(pairs: list[tuple[str, object]]):
    """The inverse of `flatten`: an object whose keys are exactly 0..n-1 was a list."""
    if len(pairs) == 1 and pairs[0][0] == "":
        return pairs[0][1]
    root: dict = {}
    for path, leaf in pairs:
        parts = [_unescape(p) for p in path.split("/")[1:]]
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = leaf
    return _lists(root)


def _lists(node):
    if not isinstance(node, dict) or not node:
        return node
    node = {k: _lists(v) for k, v in node.items()}
    if all(k.isdigit() for k in node) and sorted(int(k) for k in node) == list(range(len(node))):
        return [node[str(i)] for i in range(len(node))]
    return node


CONFIG_HEAD = ["config_id", "build", "setting", "path", "value"]


def configs_csv(data: RunData) -> str:
    """Every configuration's figures; then the run's other tables (crosschecks, …) with an empty `config_id` and
    paths `/<table>/<row>/…`."""
    body = []
    for c in configs_of(data):
        for path, leaf in flatten(c):
            body.append([str(c["id"]), c["build"], c["setting"], path, json.dumps(leaf)])
    for name, rows in other_tables(data).items():
        for i, r in enumerate(rows):
            for path, leaf in flatten(r, f"/{_escape(name)}/{i}"):
                body.append(["", str(r.get("build") or ""), str(r.get("setting") or ""), path, json.dumps(leaf)])
    return _write(CONFIG_HEAD, body)


def parse_configs(text: str) -> list[dict]:
    """Configurations as the JSON report shows them (with `ledger` and `buffers`)."""
    groups: dict[str, list[tuple[str, object]]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row["config_id"]:
            groups.setdefault(row["config_id"], []).append((row["path"], json.loads(row["value"])))
    return [unflatten(pairs) for pairs in groups.values()]


def parse_other_tables(text: str) -> dict[str, list[dict]]:
    """The run's other tables from a configurations CSV, as the JSON report shows them."""
    pairs = [(row["path"], json.loads(row["value"])) for row in csv.DictReader(io.StringIO(text))
             if not row["config_id"]]
    tree = unflatten(pairs) if pairs else {}
    return {name: rows if isinstance(rows, list) else [] for name, rows in tree.items()}


def configs_pieces(data: RunData) -> list[str]:
    """`configs_csv` as pieces (the CSV format's companion file, `formats.REGISTRY`)."""
    return [configs_csv(data)]
