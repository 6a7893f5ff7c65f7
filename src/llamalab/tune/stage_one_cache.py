"""Tune's stage one, reused: a stage one is kept under `$LLAMALAB_HOME/tune/` and read back by a later tune of the
same search, model file, build, devices and budgets (`stage_one_key`) made by the same llamalab (`made_by`: its
version and a hash of the code that predicts, dry-runs and verifies), so that a tune run again — with --exhaustive,
another goal or floor — races exactly the same front without its dry runs.

A file made by other code is not read as this code's (`load` says why), and the tune says that it computed stage one
afresh and why, in its progress and in the stored search (`StageOne.afresh`, shown by the report). Each llamalab
keeps its own file (`path`), so that two versions tuning the same search on one machine do not undo each other's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.write import atomic_write
from ..fit import budget, maxctx
from ..llamacpp.build import BuildArtifact
from ..logs import dryrun
from ..setup import configplan
from ..setup.progress import Progress
from . import records
from . import space as ts
from . import stage_one_engine as engine_stage
from .records import Default, Member
from .stage_one import StageOne, TuneSetup, need_context, stage_one

FORMAT = 2  # the shape of a cached stage one (1: `StageOne.as_dict` alone, with nothing of what made it)
STATUSES = frozenset({"unplannable", "infeasible", "pruned", "verified", "front", "dominated"})
MEASURED = frozenset({"verified", "front", "dominated"})  # statuses whose context a dry run verified


@functools.cache
def made_by() -> dict[str, str]:
    """What computes a stage one, beside what it measures: this llamalab's version and a hash of the source of the
    modules that dry-run, load, read, predict and verify (tune/stage_one.py, tune/stage_one_engine.py, tune/space.py,
    tune/records.py, fit/maxctx.py, fit/budget.py, logs/dryrun.py, setup/configplan.py)."""
    h = hashlib.sha256()
    for mod in (sys.modules[stage_one.__module__], engine_stage, ts, records, maxctx, budget, dryrun, configplan):
        try:
            h.update(Path(str(mod.__file__)).read_bytes())
        except OSError:  # no source beside the module (a frozen install): its name, and the version, must do
            h.update(mod.__name__.encode())
    return {"llamalab": __version__, "code": h.hexdigest()[:12]}


def stage_one_key(setup: TuneSetup) -> str | None:
    """What stage one's dry runs depend on, hashed: the search (the study's [tune] dimensions and floors, its
    workload's sizes, server and build arguments), the model file (path, size, modification time), the build, the
    backend and devices, and the budgets. None without budgets: then each device's budget is what it reports free,
    which changes from run to run."""
    if not setup.budgets:
        return None
    prep, st = setup.prep, setup.study
    try:
        stat = prep.model_path.stat()
    except OSError:
        return None
    what = {
        "tune": setup.spec.model_dump(include={"splits", "kv", "ubatch", "n_cpu_moe", "min_context", "parallel"}),
        "need": need_context(st), "server": st.server.model_dump(), "args": list(st.builds[0].args),
        "devices": st.devices.model_dump(), "budgets": list(setup.budgets),
        "model": [str(prep.model_path), stat.st_size, stat.st_mtime_ns],
        "build": [setup.art.key, setup.art.source.key], "backend": prep.backend,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def engine_key(setup: TuneSetup, art: BuildArtifact, one: StageOne) -> str | None:
    """What another engine's stage one depends on beside llama.cpp's (`one`, cached under its own key): that key,
    the engine's build and its arguments, and llama.cpp's front (its members are that front as the engine runs it:
    tune/stage_one_engine.py). None where llama.cpp's stage one has no key (no budgets)."""
    if one.key is None:
        return None
    build = setup.build_of(art.engine)
    what = {"llama.cpp": one.key, "engine": art.engine, "build": [art.key, art.source.key], "args": list(build.args),
            "front": [m.candidate.key() for m in one.front if m.candidate.own_engine]}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def path(home: Path, key: str) -> Path:
    """This llamalab's file for the stage one of `key`."""
    tag = hashlib.sha256(json.dumps(made_by(), sort_keys=True).encode()).hexdigest()[:8]
    return home / "tune" / f"stage1-{key}-{tag}.json"


def cache_doc(one: StageOne, key: str) -> dict[str, Any]:
    """A stage one as it is cached: its records, the key and what made it."""
    return {"format": FORMAT, "key": key, "made_by": made_by(), **one.as_dict()}


def made_by_text(by: object) -> str:
    if not isinstance(by, Mapping):
        return "an older llamalab (its file records no version)"
    return f"llamalab {by.get('llamalab')} (stage-one code {by.get('code')})"


def load(text: str, key: str) -> StageOne | str:
    """A cached stage one, or why it is not reused (it is then made again): the file is not JSON of a stage one of
    this format, was cached for another key, was made by other code (`made_by`), or holds a value of the wrong
    type."""
    try:
        d = json.loads(text)
    except ValueError:
        return "its file is not JSON"
    if not isinstance(d, dict):
        return "its file does not hold a stage one"
    if d.get("format") != FORMAT or d.get("made_by") != made_by():
        return f"it was made by {made_by_text(d.get('made_by'))}, this is {made_by_text(made_by())}"
    if d.get("key") != key:
        return "its file was cached for another search"
    if (bad := shape_problem(d)) is not None:
        return f"its file does not read as a stage one ({bad})"
    try:
        return from_dict(d, key)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        return f"its file does not read as a stage one ({type(e).__name__}: {e})"


def _fields(cls: type, d: object) -> str | None:
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(d, dict) or set(d) != names:
        return f"{cls.__name__}: fields {sorted(d) if isinstance(d, dict) else type(d).__name__}, not {sorted(names)}"
    return None


def _ints(v: object, *, positive: bool = False) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and (v > 0 if positive else v >= 0)


def _strs(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def shape_problem(d: dict[str, Any]) -> str | None:
    """The first value of a cached stage one that is not what `StageOne.as_dict` writes, or None (pure)."""
    for cls, key in ((ts.Rig, "rig"), (ts.ModelLayout, "layout"), (ts.Space, "space")):
        if (bad := _fields(cls, d.get(key))) is not None:
            return bad
    if not (_ints(d.get("dry_runs")) and isinstance(d.get("seconds"), int | float) and _strs(d.get("notes"))
            and _strs(d.get("default_extra"))):
        return "dry_runs, seconds, notes or default_extra"
    default = d.get("default")
    if not isinstance(default, dict) or not (default.get("n_ctx") is None or _ints(default.get("n_ctx"))) \
            or not isinstance(default.get("status"), str) or not _strs(default.get("args")):
        return "the default's n_ctx, status or args"
    recs = d.get("records")
    if not isinstance(recs, list) or not recs:
        return "no candidates"
    for r in recs:
        if not isinstance(r, dict) or r.get("status") not in STATUSES or not isinstance(r.get("label"), str):
            return f"a candidate's status {r.get('status') if isinstance(r, dict) else r!r}"
        if r["status"] in MEASURED and not _ints(r.get("n_ctx"), positive=True):
            return f"{r['label']}: a verified context of {r.get('n_ctx')!r}"
    return None


def from_dict(d: dict[str, Any], key: str) -> StageOne:
    """A stage one as `cache_doc` wrote it (`shape_problem` found nothing wrong)."""
    rig_fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d["rig"].items()}
    layout_fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d["layout"].items()}
    sp = d["space"]
    space = ts.Space(splits=tuple(sp["splits"]), kv=tuple((str(p[0]), str(p[1])) for p in sp["kv"]),
                     ubatch=tuple(sp["ubatch"]), n_cpu_moe=tuple(sp["n_cpu_moe"]),
                     not_searched=dict(sp["not_searched"]))
    return StageOne(rig=ts.Rig(**rig_fields), layout=ts.ModelLayout(**layout_fields), space=space,
                    default=Default.from_dict(d["default"]), default_extra=tuple(d["default_extra"]),
                    members=tuple(Member.from_dict(r) for r in d["records"]), dry_runs=int(d["dry_runs"]),
                    seconds=float(d["seconds"]), notes=tuple(d["notes"]), reused_from=key, key=key)


def cached(home: Path, key: str) -> StageOne | str | None:
    """The stage one this llamalab cached for `key`; else why none is reused where another was cached for this
    search (by another llamalab, or a file that does not read as one); None where nothing was."""
    mine = path(home, key)
    if mine.is_file():
        return load(mine.read_text(encoding="utf-8", errors="replace"), key)
    others = sorted((p for p in (home / "tune").glob(f"stage1-{key}*.json") if p != mine),
                    key=lambda p: p.stat().st_mtime)
    if not others:
        return None
    return load(others[-1].read_text(encoding="utf-8", errors="replace"), key)


def made_or_cached(setup: TuneSetup, logs: Path, home: Path, *, fresh: bool, timeout_s: float,
                   progress: Progress) -> StageOne:
    """Stage one, or the same stage one an earlier tune made (same search, model file, build, devices and budgets:
    `stage_one_key`; by the same llamalab: `made_by`), so that a tune run again — with --exhaustive, another goal
    or floor — races the same front without its dry runs. --fresh makes it again; so does a stage one cached by
    other code, which the progress and the stored search say. Each other engine's stage one (`[tune] engines`:
    tune/stage_one_engine.py) is kept apart under its own key (`engine_key`) and joined to llama.cpp's."""
    one = _reused_or_made(home, stage_one_key(setup), fresh, progress, "tune stage one",
                          "dry runs", lambda: stage_one(setup, logs, timeout_s, progress))
    for art in setup.others:
        other = _reused_or_made(home, engine_key(setup, art, one), fresh, progress,
                                f"tune stage one, {art.engine}", "loads",
                                functools.partial(engine_stage.search, setup, art, one, logs, timeout_s, progress))
        one = one.joined(other, art.engine)
    return one


def _reused_or_made(home: Path, key: str | None, fresh: bool, progress: Progress, what: str, runs: str,
                    make: Callable[[], StageOne]) -> StageOne:
    got = cached(home, key) if key is not None and not fresh else None
    if isinstance(got, StageOne):
        progress.message(f"{what}: reused from an earlier tune of this search, model, build and budgets "
                         f"({got.dry_runs} {runs}, {got.seconds:.1f} s; --fresh makes it again)")
        return got
    if got is not None:
        progress.message(f"{what}: computed afresh, not reused from the cache of this search: {got}")
    one = dataclasses.replace(make(), key=key, afresh=got)
    if key is not None:
        atomic_write(path(home, key), json.dumps(cache_doc(one, key)))
    return one
