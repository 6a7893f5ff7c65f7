"""A tune's records, typed and frozen: each candidate of the search with what every stage found of it, and
llama.cpp's default beside them. A stage adds its findings as a new value (`dataclasses.replace`), never by changing
one in place; `as_dict` gives the shape the `tunes` table has always stored (report/analysis/tune.py reads it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..llamacpp.engines import LLAMA_CPP
from . import space as ts

DEFAULT = "default"  # the build name of llama.cpp's default in a tune run


@dataclass(frozen=True)
class Member:
    """One candidate of the search. `status`: unplannable | infeasible | pruned (stage one, by prediction or dry
    run) | verified, then front | dominated (the verified front); `build` is its name in stage two (t01 …) and
    `kld` its KV pair's quality against f16/f16, once stage two has them."""

    candidate: ts.Candidate
    label: str
    pipeline_parallel: bool
    status: str = ""
    reason: str | None = None
    n_ctx: int | None = None
    predicted_n_ctx: int | None = None
    devices_mib: tuple[float, ...] | None = None
    host_mib: float | None = None
    dry_runs: int = 0
    exact: bool | None = None  # a verified context: the search ended on a measured boundary
    build: str | None = None
    kld: Mapping[str, Any] | None = None
    staged: bool = False  # given a build in stage two (its `kld` key is then stored, None for f16/f16)

    @classmethod
    def of(cls, c: ts.Candidate, rig: ts.Rig, *, devices_mib: Iterable[float] | None = None,
           **found: Any) -> Member:
        return cls(candidate=c, label=c.label(rig), pipeline_parallel=c.pipelined(rig),
                   devices_mib=tuple(devices_mib) if devices_mib is not None else None, **found)

    @property
    def kv(self) -> str:
        return self.candidate.kv

    def staged_as(self, build: str, kld: Mapping[str, Any] | None) -> Member:
        """The member as stage two runs it: its build name and its KV pair's quality."""
        return replace(self, build=build, kld=kld, staged=True)

    def as_dict(self) -> dict[str, Any]:
        c = self.candidate
        out: dict[str, Any] = {
            "key": c.key(), "label": self.label, "split": c.split, "ts": list(c.ts) if c.ts else None,
            "ctk": c.ctk, "ctv": c.ctv, "ubatch": c.ubatch, "n_cpu_moe": c.n_cpu_moe, "main_gpu": c.main_gpu,
            "args": c.args(), "pipeline_parallel": self.pipeline_parallel, "status": self.status,
            "reason": self.reason, "n_ctx": self.n_ctx, "predicted_n_ctx": self.predicted_n_ctx,
            "devices_mib": list(self.devices_mib) if self.devices_mib is not None else None,
            "host_mib": self.host_mib, "dry_runs": self.dry_runs, "build": self.build}
        if self.exact is not None:
            out["exact"] = self.exact
        if not c.own_engine:  # llama.cpp's members keep the shape every stored tune has
            out["engine"] = c.engine
        if c.fa_off:
            out["fa_off"] = True
        if self.staged:
            out["kld"] = dict(self.kld) if self.kld is not None else None
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Member:
        """A member as `as_dict` wrote it (a cached stage one); KeyError/TypeError/ValueError where it is not one."""
        c = ts.Candidate(split=str(d["split"]), ctk=str(d["ctk"]), ctv=str(d["ctv"]), ubatch=int(d["ubatch"]),
                         n_cpu_moe=int(d["n_cpu_moe"]), ts=tuple(int(x) for x in d["ts"]) if d.get("ts") else None,
                         main_gpu=int(d.get("main_gpu") or 0), engine=str(d.get("engine") or LLAMA_CPP),
                         fa_off=bool(d.get("fa_off")))
        devs = d.get("devices_mib")
        return cls(candidate=c, label=str(d["label"]), pipeline_parallel=bool(d["pipeline_parallel"]),
                   status=str(d["status"]), reason=d.get("reason"),
                   n_ctx=int(d["n_ctx"]) if d.get("n_ctx") is not None else None,
                   predicted_n_ctx=int(d["predicted_n_ctx"]) if d.get("predicted_n_ctx") is not None else None,
                   devices_mib=tuple(float(x) for x in devs) if devs is not None else None,
                   host_mib=float(d["host_mib"]) if d.get("host_mib") is not None else None,
                   dry_runs=int(d.get("dry_runs") or 0), exact=d.get("exact"), build=d.get("build"),
                   kld=d.get("kld"), staged="kld" in d)


@dataclass(frozen=True)
class Default:
    """llama.cpp's default (the study's arguments and nothing else) under the budgets, from its dry run."""

    n_ctx: int | None
    status: str
    reason: str | None
    fit_ok: bool | None
    fit_message: str | None
    ctx_reduced_from: int | None
    pipeline_parallel: bool | None
    sched_copies: int | None
    devices_mib: tuple[float | None, ...]
    host_mib: float | None
    over_budget: bool
    fit_split: bool  # ran with `-ts 0,…,0`: llama.cpp's fit placed the layers itself
    args: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"n_ctx": self.n_ctx, "status": self.status, "reason": self.reason, "fit_ok": self.fit_ok,
                "fit_message": self.fit_message, "ctx_reduced_from": self.ctx_reduced_from,
                "pipeline_parallel": self.pipeline_parallel, "sched_copies": self.sched_copies,
                "devices_mib": list(self.devices_mib), "host_mib": self.host_mib, "over_budget": self.over_budget,
                "fit_split": self.fit_split, "args": list(self.args)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Default:
        return cls(n_ctx=d["n_ctx"], status=d["status"], reason=d["reason"], fit_ok=d["fit_ok"],
                   fit_message=d["fit_message"], ctx_reduced_from=d["ctx_reduced_from"],
                   pipeline_parallel=d["pipeline_parallel"], sched_copies=d["sched_copies"],
                   devices_mib=tuple(d["devices_mib"]), host_mib=d["host_mib"], over_budget=bool(d["over_budget"]),
                   fit_split=bool(d["fit_split"]), args=tuple(d["args"]))


@dataclass(frozen=True)
class EngineSearch:
    """Another engine's part of stage one (tune/stage_one_engine.py): its rig (its own copies and pipeline
    parallelism), what it searched, and how: its members are in the stage one's `members` beside llama.cpp's."""

    engine: str
    rig: ts.Rig
    space: ts.Space
    loads: int  # real loads stopped once the context was made (no dry run: it has no fit of the context)
    seconds: float
    members: int
    front: int
    reused_from: str | None = None  # read from the cache of an earlier tune (its key)
    afresh: str | None = None  # why one cached for this search was not reused
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "rig": asdict(self.rig), "loads": self.loads, "seconds": self.seconds,
                "members": self.members, "front": self.front, "reused_from": self.reused_from,
                "afresh": self.afresh, "notes": list(self.notes),
                "space": {"splits": list(self.space.splits), "kv": ["/".join(p) for p in self.space.kv],
                          "ubatch": list(self.space.ubatch), "n_cpu_moe": list(self.space.n_cpu_moe),
                          "not_searched": dict(self.space.not_searched)}}


def ledger_contexts(configs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The context each configuration's server ran with (its ledger's n_ctx), by build, for those that loaded."""
    out = {}
    for c in configs:
        led = c.get("ledger") or {}
        if c.get("status") == "ok" and led.get("n_ctx"):
            out[str(c["build"])] = int(led["n_ctx"])
    return out
