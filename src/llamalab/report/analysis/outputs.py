"""Each configuration's outputs against its setting's baseline (the study's first build), from the stored run: the
verdict of every arm (quality/outputs.py `judge`, over the `outputs` and `output_logits` tables), the baseline's own
A/A, a short word for the tables, and the first divergence of each arm that parts with the baseline. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...quality import outputs as q
from ...quality.kv import is_synthetic
from ..data import RunData
from .verdict import study_builds, study_settings

NOT_RUN = "outputs not compared (this run predates the output check)"


def baseline(data: RunData) -> str | None:
    order = study_builds(data)
    return order[0] if order else None


def compared(data: RunData) -> bool:
    """Whether the run compared any outputs (a run before the check has no reference generation stored)."""
    return bool(data.tables.get("outputs") or data.tables.get("output_logits"))


def verdicts(data: RunData) -> dict[tuple[str, str], q.Verdict]:
    """(build, setting) → the configuration's verdict against its setting's baseline; the baseline's own entry is
    its A/A (kind SAME where it repeats itself). Every configuration that ran has one ("not compared" where nothing
    was stored)."""
    if "output_verdicts" not in data.memo:
        data.memo["output_verdicts"] = _verdicts(data)
    out: dict[tuple[str, str], q.Verdict] = data.memo["output_verdicts"]
    return out


def _rows(data: RunData, table: str) -> Iterable[dict[str, Any]]:
    return data.tables.get(table) or []


def _verdicts(data: RunData) -> dict[tuple[str, str], q.Verdict]:
    base = baseline(data)
    ran = {(c["build"], c["setting"]) for c in data.ok_configs()}
    if base is None:
        return {}
    if not compared(data):  # in study order (a set's order changes from one process to the next)
        return {(b, s): q.not_compared(base, "this run predates the output check")
                for s in study_settings(data) for b in study_builds(data) if (b, s) in ran}
    gens: dict[tuple[str, str], dict[str, dict[int, list[q.Generated]]]] = {}
    errors: dict[tuple[str, str], str] = {}
    for r in _rows(data, "outputs"):
        res = r.get("result") or {}
        if res.get("error"):
            errors[(r["build"], r["setting"])] = str(res["error"])
            continue
        seqs = [q.Generated.of(s) for s in res.get("sequences") or []]
        gens.setdefault((r["build"], r["setting"]), {}).setdefault(str(r["mode"]), {})[int(r["rep"])] = seqs
    klds = {(r["build"], r["setting"]): r.get("result") or {} for r in _rows(data, "output_logits")}
    synthetic = is_synthetic(str((data.model or {}).get("name") or ""))
    out: dict[tuple[str, str], q.Verdict] = {}
    for setting in study_settings(data):
        b = gens.get((base, setting), {})
        reps = q.repetitions(b)
        for build in [x for x in study_builds(data) if (x, setting) in ran]:
            key = (build, setting)
            kld = klds.get(key)
            kld_error = str(kld["error"]) if kld and kld.get("error") else None
            if kld_error:
                kld = None
            if key in errors or (base, setting) in errors:
                why = errors.get(key) or errors[(base, setting)]
                out[key] = q.not_compared(base, f"the reference generation failed: {why}")
                continue
            if build == base:
                out[key] = _aa(base, reps, kld, synthetic)
                continue
            mine = q.first_repetition(gens.get(key, {}))
            out[key] = q.judge(base, reps, mine, kld, synthetic=synthetic, kld_error=kld_error)
    return out


def _aa(base: str, reps: dict[str, list[list[q.Generated]]], kld: dict[str, Any] | None, synthetic: bool
        ) -> q.Verdict:
    """The baseline against itself: its second generation per mode (and its logits against its own saved ones).
    Where it parts with itself it is not deterministic there (batched requests in llama.cpp are not
    bit-invariant): the arms are judged against that spread."""
    if not any(len(r) > 1 for r in reps.values()):
        return q.not_compared(base, "no second generation of the baseline")
    modes = tuple(q.compare(r[0], r[1], mode) for mode, r in reps.items() if len(r) > 1)
    said = []
    for m in modes:
        where = "single-stream" if m.mode == "single" else "at K requests at once"
        if m.parting is None:
            said.append(f"deterministic {where}")
        else:
            said.append(f"not deterministic {where} (parts with itself at token {m.parting.pos + 1}"
                        + ("" if synthetic or m.parting.margin is None else f", margin {100 * m.parting.margin:.2g}%")
                        + ")")
    logits = q.logits_same(kld, synthetic)
    if logits is not None:
        said.append("logits " + ("the same" if logits else "differ") + f" ({q.kld_words(kld)})")
    kind = q.SAME if all(m.parting is None for m in modes) and logits is not False else q.NEAR
    return q.Verdict(kind=kind, words="baseline; against itself (A/A): " + "; ".join(said), baseline=base,
                     modes=modes, aa=modes, kld=kld, synthetic=synthetic)


def short(v: q.Verdict | None, build: str) -> str:
    """A table cell: "same", "near tie (token 41)", "differs (token 2)", "baseline", "not compared"."""
    if v is None:
        return "not compared"
    if build == v.baseline:
        first = min(((m.parting.pos, m.mode) for m in v.modes if m.parting is not None), default=None)
        return "baseline" + ("" if first is None else f" (A/A parts at token {first[0] + 1}, {first[1]})")
    return _short_kind(v)


def _short_kind(v: q.Verdict) -> str:
    first = min((m.parting.pos for m in v.modes if m.parting is not None), default=None)
    if v.kind == q.SAME:
        return "same"
    if v.kind == q.NEAR:
        return f"near tie (token {first + 1})" if first is not None else "near tie"
    if v.kind == q.DIFFERS:
        return f"differs (token {first + 1})" if first is not None else "differs (logits)"
    return "not compared"


def cell(data: RunData, build: str, setting: str) -> str:
    return short(verdicts(data).get((build, setting)), build)


def differing(data: RunData) -> list[tuple[str, str, q.Verdict]]:
    """The arms that part with their baseline (near ties included), with where: what the divergence section
    shows, in study order."""
    out = []
    for (b, s), v in verdicts(data).items():
        if b != v.baseline and v.kind in (q.NEAR, q.DIFFERS) and any(m.parting for m in v.modes):
            out.append((b, s, v))
    return out


def lines(data: RunData) -> list[str]:
    """One sentence per configuration: its verdict against the baseline (the baseline's A/A first)."""
    if not compared(data):
        return [NOT_RUN] if data.ok_configs() else []
    out = []
    for (b, s), v in verdicts(data).items():
        out.append(f"{b} × {s}: {v.words}" if b != v.baseline else f"{b} × {s}: {v.words}")
    return out


def as_json(data: RunData) -> list[dict[str, Any]]:
    return [{"build": b, "setting": s, **v.as_dict()} for (b, s), v in verdicts(data).items()]
