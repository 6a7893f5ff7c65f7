"""Memory and speed per llama.cpp version: the same configuration on several sources (the `versions` preset).

One row per build × setting whose builds came from different llama.cpp sources (`builds[].source`, given
binaries): the version and where it came from, then compute, KV cache and weights summed over the devices and
the host, the fitted context, the scheduler's copies, and the single-stream and highest-level speeds. The
sentences compare every version with the study's first, figure by figure. Pure.
"""

from __future__ import annotations

from ..data import RunData
from ..records import BuildRecord
from . import speed


def _dict(v) -> dict:
    """A decoded JSON column as a dict ({} for NULL, damaged or non-object values)."""
    return v if isinstance(v, dict) else {}


def source_of(build: BuildRecord) -> dict:
    """What llama.cpp a stored build ran: version, commit, and where it came from in words."""
    given = _dict(build.get("binary"))
    if given:
        return {"version": str(given.get("version") or "?"), "commit": given.get("commit"),
                "origin": f"binaries in {given.get('dir', '?')}"}
    origin = str(build.get("source_origin") or "")
    kind, _, rest = origin.partition(":")
    if kind == "pypi":
        words = "PyPI " + rest.replace("==", " ")
    elif kind == "git":
        repo, _, sha = rest.rpartition("@")
        words = f"commit of {repo}"
    elif kind == "dir":
        words = f"folder {rest}"
    else:
        words = origin or "?"
    return {"version": build.get("source_version") or "?", "commit": build.get("source_commit"), "origin": words}


def _key(build: BuildRecord) -> tuple:
    s = source_of(build)
    return s["version"], s["commit"], s["origin"]


def applies(data: RunData) -> bool:
    """Whether the run's measured builds ran more than one llama.cpp."""
    return len({_key(b) for b in data.builds if b.get("status") == "ok"}) > 1


def _sum(parts: dict, field: str) -> float | None:
    vals = [v for p in parts.values() if isinstance(p, dict) and (v := p.get(field)) is not None]
    return round(sum(vals), 2) if vals else None


def _total(led: dict, field: str) -> float | None:
    a, b = _sum(led.get("devices") or {}, field), _sum(led.get("host") or {}, field)
    return None if a is None and b is None else round((a or 0) + (b or 0), 2)


def rows(data: RunData) -> list[dict]:
    """Per build × setting that loaded, in study order (pure)."""
    from .outputs import cell as outputs_cell
    from .verdict import study_builds, study_settings

    builds = {b["name"]: b for b in data.builds}
    thr = speed.throughput_table(data)
    first_cell = data.cells[0] if data.cells else None
    out = []
    for bname in dict.fromkeys(study_builds(data) + list(builds)):
        for sname in dict.fromkeys(study_settings(data) + [c["setting"] for c in data.configs]):
            led = data.ledger_for(bname, sname)
            if bname not in builds or led is None:
                continue
            src = source_of(builds[bname])
            if (engine := data.engine(bname)) != "llama.cpp":  # another engine: named with its version
                src = {**src, "version": f"{engine} {src['version']}"}
            mine = [r for r in thr if r["build"] == bname and r["setting"] == sname
                    and (first_cell is None or (r["prompt_tokens"], r["output_tokens"]) == first_cell)]
            single = next((r for r in mine if r["concurrency"] == 1), None)
            top = max(mine, key=lambda r: r["concurrency"], default=None)
            out.append({
                "build": bname, "setting": sname, **src,
                "compute_mib": _total(led, "compute_mib"),
                "kv_mib": _total(led, "kv_mib"),
                "model_mib": _total(led, "model_mib"),
                "n_ctx": led.get("n_ctx"),
                "copies": led.get("sched_copies"),
                "input_tps": single["input_tps"] if single else None,
                "output_tps": single["output_tps"] if single else None,
                "top_concurrency": top["concurrency"] if top and top["concurrency"] > 1 else None,
                "aggregate_output_tps": top["aggregate_output_tps"] if top and top["concurrency"] > 1 else None,
                "outputs": outputs_cell(data, bname, sname),
            })
    return out


def table(rows_: list[dict]) -> tuple[list[str], list[list[str]]]:
    from .tables import format_cell

    top = next((r["top_concurrency"] for r in rows_ if r["top_concurrency"]), None)
    head = ["llama.cpp", "Commit", "From", "Build", "Setting", "Compute (MiB)", "KV cache (MiB)", "Weights (MiB)",
            "Context (tokens)", "Copies", "Prompt t/s", "Output t/s", "Outputs vs the first"]
    if top:
        head.append(f"Aggregate output t/s at {top}")
    body = []
    for r in rows_:
        row = [r["version"], (r["commit"] or "unknown")[:9], r["origin"], r["build"], r["setting"],
               format_cell(r["compute_mib"]), format_cell(r["kv_mib"]), format_cell(r["model_mib"]),
               format_cell(r["n_ctx"]), format_cell(r["copies"]),
               format_cell(r["input_tps"]), format_cell(r["output_tps"]), r.get("outputs") or "not compared"]
        if top:
            row.append(format_cell(r["aggregate_output_tps"]) if r["top_concurrency"] == top else "–")
        body.append(row)
    return head, body


def _delta(new: float | None, old: float | None, unit: str) -> str | None:
    if new is None or old is None:
        return None
    d = new - old
    if abs(d) < 0.005:
        return f"the same ({old:,.2f} {unit})" if unit == "MiB" else f"the same ({old:,.0f} {unit})"
    pct = f", {d / old:+.1%}" if old else ""
    num = f"{d:+,.2f}" if unit == "MiB" else f"{d:+,.0f}"
    return f"{num} {unit}{pct}"


def _name(row: dict) -> str:
    """`b11434`, or `b11434 (new)` where the build is named otherwise."""
    return row["version"] if row["build"] == row["version"] else f"{row['version']} ({row['build']})"


def sentences(rows_: list[dict]) -> list[str]:
    """Each later version against the first, per setting: memory, context and outputs (pure). Speed verdicts with
    their intervals are the report's speed section's."""
    out = []
    by_setting: dict[str, list[dict]] = {}
    for r in rows_:
        by_setting.setdefault(r["setting"], []).append(r)
    for setting, rs in by_setting.items():
        base = rs[0]
        for r in rs[1:]:
            if (r["version"], r["commit"]) == (base["version"], base["commit"]):
                continue
            parts = [f"{what} {d}" for what, d in (
                ("compute", _delta(r["compute_mib"], base["compute_mib"], "MiB")),
                ("KV cache", _delta(r["kv_mib"], base["kv_mib"], "MiB")),
                ("weights", _delta(r["model_mib"], base["model_mib"], "MiB")),
                ("context", _delta(r["n_ctx"], base["n_ctx"], "tokens"))) if d]
            if r["copies"] != base["copies"]:
                parts.append(f"sched copies {base['copies']} → {r['copies']}")
            if r.get("outputs") and r["outputs"] != "not compared":
                parts.append(f"outputs {r['outputs']}" + ("" if r["outputs"] == "same" else " (output drift: the "
                                                          "outputs section says where)"))
            if parts:
                out.append(f"{_name(r)} against {_name(base)}, {setting}: " + "; ".join(parts) + ".")
    return out
