"""`llamalab bisect GOOD BAD`: the first commit of a llama.cpp checkout that changes a memory figure.

Every commit is measured with a dry run (`configplan.plan_config`: llama-server's no-alloc memory fit, no weights
loaded) of one configuration of a study. Building dominates, so the commits share one build tree:

- a clone of the checkout (`git clone --shared --no-checkout`: it borrows the checkout's objects, and the user's
  repository, work tree and refs are never touched) under `$LLAMALAB_HOME/bisect/`, checked out commit by commit
  (git rewrites only the files that differ, so their timestamps alone change);
- one build folder for the configuration's backend and CMake options; before each configure its CMakeCache.txt is
  removed, so the CMake defaults of *that* commit apply (a changed `option(... default)` would otherwise stay
  cached), while the object files stay and ninja recompiles only what the checkout changed;
- only the programs the dry run starts are built (llama-server, and ggml-rpc-server for CPU-RPC devices).

The search itself (`search`) is pure: given the commits from GOOD to BAD and a function that measures one, it
finds the first commit whose figure differs from GOOD's, skipping commits that cannot be measured (a build that
fails), as `git bisect skip` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import proc
from ..core.errors import BuildError, ConfigError, LlamalabError, SourceError
from ..core.paths import locked
from ..llamacpp import build as buildmod
from ..llamacpp import ccache
from ..llamacpp.build import BuildArtifact
from ..llamacpp.source import Source, build_number_of, git_commit
from ..setup import configplan
from ..setup import prepare as session
from ..setup.options import RunOptions
from ..setup.progress import Progress
from ..study.spec import Config, Study, configs, with_budgets
from . import plan

if TYPE_CHECKING:
    from ..models.synthetic import ModelInfo

# metric → what it sums, from a dry run's figures
METRICS: dict[str, str] = {
    "compute_mib": "compute buffers of every device and the host (MiB)",
    "kv_mib": "KV cache (context) buffers of every device and the host (MiB)",
    "model_mib": "weights on every device and the host (MiB)",
    "used_mib": "weights + KV cache + compute of every device and the host (MiB)",
    "n_ctx": "the context llama.cpp's fit chose (tokens)",
    "copies": "the scheduler's copies (sched copies)",
    "graph_splits": "the graph's splits",
}
TOLERANCE = 0.005  # dry-run figures print with 0.01 MiB; closer than this is the same figure


class BisectError(LlamalabError):
    """The two ends cannot be compared: not commits of one line, or an end that cannot be measured."""


# ---------------------------------------------------------------- pure parts


def metric_value(cp: configplan.ConfigPlan, metric: str) -> float | None:
    """The figure `metric` of one dry run (pure); None where the dry run did not print it."""
    if metric == "n_ctx":
        return cp.n_ctx
    if metric == "copies":
        return cp.sched_copies
    if metric == "graph_splits":
        return cp.graph_splits
    attr = {"compute_mib": "compute_mib", "kv_mib": "context_mib", "model_mib": "model_mib",
            "used_mib": "used_mib"}[metric]
    vals = [getattr(d, attr) for d in [*cp.devices, *([cp.host] if cp.host else [])]]
    vals = [v for v in vals if v is not None]
    return round(sum(vals), 2) if vals else None


def per_device(cp: configplan.ConfigPlan, metric: str) -> dict[str, float | None]:
    """The figure per device (and host) where the metric is a sum of them (pure)."""
    attr = {"compute_mib": "compute_mib", "kv_mib": "context_mib", "model_mib": "model_mib",
            "used_mib": "used_mib"}.get(metric)
    if attr is None:
        return {}
    out = {d.name: getattr(d, attr) for d in cp.devices}
    if cp.host and getattr(cp.host, attr) is not None:
        out["Host"] = getattr(cp.host, attr)
    return out


def same(a: float | None, b: float | None, tolerance: float = TOLERANCE) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tolerance


@dataclass
class Step:
    """One commit measured (or skipped: it could not be built or dry-run)."""

    commit: str
    value: float | None = None
    ok: bool = True
    reason: str | None = None
    devices: dict[str, float | None] = field(default_factory=dict)
    build_seconds: float = 0.0
    dry_run_seconds: float = 0.0
    subject: str = ""


@dataclass
class Outcome:
    metric: str
    good: str
    bad: str
    commits: int  # commits from GOOD to BAD, both included
    first: str | None  # the first commit whose figure differs from GOOD's (None: the same at both ends)
    before: float | None  # GOOD's figure (the figure up to `first`)
    after: float | None  # the figure at `first`
    untested: list[str] = field(default_factory=list)  # commits before `first` that could not be measured
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0
    parent: str | None = None  # `first`'s predecessor on the searched line
    link: str | None = None

    @property
    def build_seconds(self) -> float:
        return round(sum(s.build_seconds for s in self.steps), 2)

    @property
    def dry_run_seconds(self) -> float:
        return round(sum(s.dry_run_seconds for s in self.steps), 2)

    def to_json(self) -> dict:
        d = asdict(self)
        d["build_seconds"], d["dry_run_seconds"] = self.build_seconds, self.dry_run_seconds
        return d


def _pick(candidates: list[int], lo: int, hi: int) -> int:
    """The untested commit nearest the middle of (lo, hi)."""
    mid = (lo + hi) / 2
    return min(candidates, key=lambda i: (abs(i - mid), i))


def search(commits: Sequence[str], measure: Callable[[str], Step], metric: str = "compute_mib",
           tolerance: float = TOLERANCE) -> Outcome:
    """Bisect `commits` (GOOD first, BAD last, each the parent of the next) for the first whose figure differs
    from GOOD's (pure, given `measure`). Both ends must measure; a commit in between that does not is skipped and
    the search goes on around it; if the change lies next to skipped commits, they are listed in `untested`."""
    if len(commits) < 2:
        raise BisectError("GOOD and BAD are the same commit: there is nothing to bisect.",
                          tip="give two different commits, GOOD an ancestor of BAD.")
    steps: list[Step] = []

    def run(i: int) -> Step:
        s = measure(commits[i])
        steps.append(s)
        return s

    n = len(commits)
    good, bad = run(0), run(n - 1)
    for end, s in (("GOOD", good), ("BAD", bad)):
        if not s.ok:
            raise BisectError(f"{end} ({s.commit[:9]}) could not be measured: {s.reason}",
                              tip="both ends must build and dry-run; pick another commit for that end.")
    out = Outcome(metric=metric, good=commits[0], bad=commits[-1], commits=n, first=None, before=good.value,
                  after=bad.value, steps=steps)
    if same(good.value, bad.value, tolerance):
        return out
    lo, hi = 0, n - 1  # lo: figure as GOOD's; hi: figure changed
    skipped: set[int] = set()
    while True:
        candidates = [i for i in range(lo + 1, hi) if i not in skipped]
        if not candidates:
            break
        i = _pick(candidates, lo, hi)
        s = run(i)
        if not s.ok:
            skipped.add(i)
        elif same(s.value, good.value, tolerance):
            lo = i
        else:
            hi = i
    at = next(s for s in reversed(steps) if s.commit == commits[hi])
    out.first, out.after, out.parent = commits[hi], at.value, commits[hi - 1]
    out.untested = [commits[i] for i in range(lo + 1, hi)]
    return out


_GITHUB = re.compile(r"^(?:https?://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
                     r"(?P<slug>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


def github_slug(remote_url: str) -> str | None:
    """owner/name of a GitHub remote URL (https, ssh, scp-like), else None (pure)."""
    m = _GITHUB.match(remote_url.strip())
    return m.group("slug") if m else None


def diff_link(remote_url: str | None, repo: Path, commit: str, parent: str | None) -> str:
    """Where to read the change: GitHub's commit page (and the comparison with its parent) for a GitHub remote,
    else the `git show` command (pure)."""
    slug = github_slug(remote_url or "")
    if slug:
        link = f"https://github.com/{slug}/commit/{commit}"
        if parent:
            link += f" (compare: https://github.com/{slug}/compare/{parent}...{commit})"
        return link
    return f"git -C {repo} show {commit}"


def render(o: Outcome, repo: Path) -> str:
    """The bisect's answer as text (pure)."""
    what = METRICS[o.metric]
    lines = [f"bisect of {o.metric} ({what}) over {o.commits} commits, {o.good[:9]}..{o.bad[:9]} of {repo}:", ""]
    for s in o.steps:
        v = "not measured: " + (s.reason or "?") if not s.ok else _fmt(s.value)
        devs = ", ".join(f"{k} {_fmt(x)}" for k, x in s.devices.items())
        lines.append(f"  {s.commit[:9]}  {v:>12}  (build {s.build_seconds:.0f} s, dry run {s.dry_run_seconds:.0f} s)"
                     + (f"  {devs}" if devs and s.ok else "") + (f"  {s.subject}" if s.subject else ""))
    lines.append("")
    if o.first is None:
        lines.append(f"{o.metric} is {_fmt(o.before)} at both ends: no commit between them changes it.")
    else:
        subject = next((s.subject for s in o.steps if s.commit == o.first), "")
        lines.append(f"first commit that changes {o.metric}: {o.first}" + (f" {subject}" if subject else ""))
        lines.append(f"  {o.metric}: {_fmt(o.before)} → {_fmt(o.after)}")
        if o.untested:
            lines.append(f"  (or one of the {len(o.untested)} commit(s) before it that could not be measured: "
                         + ", ".join(c[:9] for c in o.untested) + ")")
        if o.link:
            lines.append(f"  diff: {o.link}")
    lines.append(f"bisect took {o.seconds:.0f} s: {len(o.steps)} commits measured, builds {o.build_seconds:.0f} s, "
                 f"dry runs {o.dry_run_seconds:.0f} s")
    return "\n".join(lines) + "\n"


def _fmt(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:,.2f}" if isinstance(v, float) and v != int(v) else f"{int(v):,}"


# ---------------------------------------------------------------- side effects


def commit_line(repo: Path, good: str, bad: str) -> list[str]:
    """GOOD, then every commit on BAD's first-parent line after GOOD up to BAD (full hashes)."""
    g, b = git_commit(repo, good), git_commit(repo, bad)
    rc, _ = proc.capture(["git", "-C", str(repo), "merge-base", "--is-ancestor", g, b])
    if rc != 0:
        raise BisectError(f"GOOD {good} ({g[:9]}) is not an ancestor of BAD {bad} ({b[:9]}) in {repo}.",
                          tip="GOOD is the older commit with the old figure, BAD a later one on the same line.")
    rc, out = proc.capture(["git", "-C", str(repo), "rev-list", "--first-parent", "--ancestry-path", "--reverse",
                            f"{g}..{b}"], timeout_s=120)
    if rc != 0:
        raise BisectError(f"git rev-list {g[:9]}..{b[:9]} failed: {out.strip()[:300]}")
    line = [c for c in out.split() if c]
    if not line or line[-1] != b:
        raise BisectError(f"BAD {b[:9]} is not reached from GOOD {g[:9]} along first parents.",
                          tip="pick GOOD on BAD's first-parent line (git log --first-parent BAD).")
    return [g, *line]


def subject_of(repo: Path, commit: str) -> str:
    rc, out = proc.capture(["git", "-C", str(repo), "log", "-1", "--format=%s", commit])
    return out.strip()[:120] if rc == 0 else ""


def remote_url(repo: Path) -> str | None:
    """The URL of `origin`, else of the first remote; None without remotes."""
    rc, out = proc.capture(["git", "-C", str(repo), "remote"])
    names = out.split() if rc == 0 else []
    if not names:
        return None
    name = "origin" if "origin" in names else names[0]
    rc, out = proc.capture(["git", "-C", str(repo), "remote", "get-url", name])
    return out.strip() if rc == 0 else None


@dataclass
class Tree:
    """One checkout and one build folder that every commit of a bisect goes through."""

    repo: Path
    home: Path
    backend: str
    options: dict[str, str]
    targets: tuple[str, ...]
    extra_defines: dict[str, str] = field(default_factory=dict)
    build_env: dict[str, str] = field(default_factory=dict)
    jobs: int = field(default_factory=lambda: os.cpu_count() or 2)
    progress: Progress | None = None

    @property
    def root(self) -> Path:
        h = hashlib.sha256(str(self.repo.resolve()).encode()).hexdigest()[:10]
        return Path(os.path.realpath(self.home)) / "bisect" / f"{self.repo.resolve().name}-{h}"

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def build_dir(self) -> Path:
        return self.root / "build" / buildmod.options_key(self.backend, self.options)

    def _git(self, *args: str, timeout_s: float = 600) -> str:
        rc, out = proc.capture(["git", "-C", str(self.src), *args], timeout_s=timeout_s)
        if rc != 0:
            raise SourceError(f"git {' '.join(args)} in {self.src} failed: {out.strip()[:400]}",
                              tip=f"delete {self.root} and run again (it is llamalab's own copy).")
        return out

    def checkout(self, commit: str) -> None:
        if not (self.src / ".git").exists():
            self.src.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(self.src, ignore_errors=True)
            rc, out = proc.capture(["git", "clone", "--quiet", "--shared", "--no-checkout", str(self.repo.resolve()),
                                    str(self.src)], timeout_s=600)
            if rc != 0:
                raise SourceError(f"git clone --shared of {self.repo} failed: {out.strip()[:400]}",
                                  tip="check that the folder is a readable git repository.")
        # the commit may be newer than the clone: borrowed objects are all there, no fetch needed
        self._git("-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", commit)
        self._git("clean", "-q", "-d", "-f", "-x")

    def build(self, commit: str) -> BuildArtifact:
        """Check out `commit` and build the targets in the shared build folder."""
        self.checkout(commit)
        b = self.build_dir
        b.mkdir(parents=True, exist_ok=True)
        (b / "CMakeCache.txt").unlink(missing_ok=True)  # this commit's CMake defaults, not the last one's
        log = b / "build.log"
        log.unlink(missing_ok=True)
        src = Source(path=self.src, origin=f"git:{self.repo.resolve()}@{commit}",
                     build_number=build_number_of(self.repo, commit), commit=commit)
        what = f"llama.cpp {commit[:9]} ({', '.join(self.targets)})"
        configure = buildmod.cmake_configure_argv(ccache.source_link(b, self.src), b, self.backend, self.options,
                                                  {**src.cmake_defines(), **self.extra_defines},
                                                  generator="Ninja" if shutil.which("ninja") else None)
        env = {**self.build_env, **ccache.env(b, Path(os.path.realpath(self.home)))}
        t0 = time.monotonic()
        progress = self.progress.build if self.progress else None

        def steps() -> None:
            ccache.relative_unity_includes(b, lambda: buildmod.run_step(configure, log, what, "configure",
                                                                         env=env or None, progress=progress))
            buildmod.run_step(buildmod.cmake_build_argv(b, self.targets, self.jobs), log, what, "build",
                              env=env or None, progress=progress)

        counts = ccache.counted(env, steps)
        if counts is not None:
            (b / f"ccache-{commit[:12]}.json").write_text(json.dumps(counts.as_dict()))
        if self.progress:
            self.progress.build_done()
        missing = buildmod.broken_outputs({b / "bin" / buildmod.TARGETS[t]: True for t in self.targets})
        if missing:
            raise BuildError(f"{what} built, but {'; '.join(missing)}.", tip=f"delete {self.root} and run again.")
        return BuildArtifact(name=commit[:9], key=f"bisect-{commit[:12]}", source=src, backend=self.backend,
                             options=dict(self.options), bin_dir=b / "bin", build_seconds=time.monotonic() - t0,
                             cmake_argv=tuple(configure))


def pick_config(study: Study, build: str | None, setting: str | None) -> Config:
    """The configuration a bisect measures (pure)."""
    for c in configs(study):
        if (build is None or c.build.name == build) and (setting is None or c.setting.name == setting):
            if c.build.bin is not None:
                raise ConfigError(f"build {c.build.name} runs given binaries ({c.build.bin}); a bisect builds every "
                                  "commit itself.", tip="pick a build without bin (--build NAME).")
            return c
    raise ConfigError(f"the study has no configuration {build or '(first build)'} × {setting or '(first setting)'}.",
                      tip="builds: " + ", ".join(b.name for b in study.builds) + "; settings: "
                          + ", ".join(s.name for s in study.settings) + ".")


def bisect(study: Study, opts: RunOptions, progress: Progress) -> Outcome:
    """Find the first commit between GOOD and BAD (`opts.bisect`) whose dry-run figure differs from GOOD's, under
    the budgets (--budget over [devices] vram)."""
    target = opts.bisect
    if target is None:
        raise ConfigError("a bisect needs the commits to search.", tip="llamalab bisect GOOD BAD --repo DIR")
    if target.metric not in METRICS:
        raise ConfigError(f"unknown metric {target.metric!r}.", tip="metrics: " + ", ".join(METRICS) + ".")
    t0 = time.monotonic()
    study = with_budgets(study, opts.budgets_mib)
    configplan.check_fit_on(study)
    cfg = pick_config(study, target.build, target.setting)
    repo = target.repo.expanduser().resolve()
    commits = commit_line(repo, target.good, target.bad)
    progress.message(f"bisecting {target.metric} over {len(commits)} commits of {repo} "
                     f"(configuration {cfg.build.name} × {cfg.setting.name})")
    backend = session.resolve_backend(study, opts.home, progress)
    extra, build_env = session.build_setup(backend, opts.home)
    tree = Tree(repo=repo, home=opts.home, backend="cpu-rpc" if backend == "rpc" else backend,
                options=buildmod.normalize(cfg.build.cmake), targets=session.needed_targets(study, backend),
                extra_defines=extra, build_env=build_env, jobs=opts.jobs or (os.cpu_count() or 2), progress=progress)
    from ..models import synthetic as models

    model_path, _ = plan.plan_model(study, opts, progress)
    run = _Bisecting(study=study, cfg=cfg, repo=repo, tree=tree, backend=backend, model_path=model_path,
                     model_info=models.read_info(model_path),
                     logs=opts.logs_dir or tree.root / "logs", metric=target.metric, timeout_s=opts.timeout_s,
                     progress=progress)
    with locked(tree.root / ".lock"):
        out = search(commits, run.measure, target.metric)
    if out.first is not None:
        out.link = diff_link(remote_url(repo), repo, out.first, out.parent)
    out.seconds = round(time.monotonic() - t0, 2)
    return out


@dataclass
class _Bisecting:
    """What every commit's measurement shares: the configuration, the build tree, the model, the logs."""

    study: Study
    cfg: Config
    repo: Path
    tree: Tree
    backend: str
    model_path: Path
    model_info: ModelInfo
    logs: Path
    metric: str
    timeout_s: float
    progress: Progress

    def measure(self, commit: str) -> Step:
        """One commit: built in the shared tree, then dry-run (its figure, or why it has none)."""
        step = Step(commit=commit, subject=subject_of(self.repo, commit))
        self.progress.message(f"commit {commit[:9]} {step.subject}")
        t = time.monotonic()
        try:
            art = self.tree.build(commit)
        except BuildError as e:
            step.ok, step.reason = False, f"build failed: {e.message.splitlines()[0]}"
            step.build_seconds = round(time.monotonic() - t, 2)
            self.progress.warn(f"{commit[:9]}: {step.reason}")
            return step
        step.build_seconds = round(time.monotonic() - t, 2)
        t = time.monotonic()
        try:
            cp = self.dry_run(art, self.logs / commit[:12])
        except LlamalabError as e:
            step.ok, step.reason = False, e.message.splitlines()[0]
        else:
            if cp.status != "ok":
                step.ok, step.reason = False, cp.reason
            else:
                step.value, step.devices = metric_value(cp, self.metric), per_device(cp, self.metric)
        step.dry_run_seconds = round(time.monotonic() - t, 2)
        self.progress.message(f"  {commit[:9]}: {self.metric} = {_fmt(step.value)}" if step.ok else
                              f"  {commit[:9]}: not measured ({step.reason})")
        return step

    def dry_run(self, art: BuildArtifact, here: Path) -> configplan.ConfigPlan:
        from ..llamacpp import vulkan as vulkanmod
        from ..machine import gpu

        study, cfg, backend = self.study, self.cfg, self.backend
        vk = vulkanmod.physical_devices(art.binary("llama-server"), art.env()) if backend == "vulkan" else []
        prep = session.Prepared(study=study, backend=backend, source=art.source, model_path=self.model_path,
                                model_info=self.model_info, artifacts={cfg.build.name: art},
                                skipped={}, vulkan_devices=vk,
                                local_gpus=len(gpu.probe()) if backend == "cuda" else 0)
        with session.device_setup(prep, art, configplan.mkdir(here / "devices")) as dev:
            env = {**art.env(), **dev.env}
            emu = session.budget_emulation(study, art, dev, env, [*study.server.args, *cfg.build.args])
            return configplan.plan_config(prep, cfg, art, dev, env, emu, here, self.timeout_s)
