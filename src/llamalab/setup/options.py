"""The one options object of `run`, `plan`, `tune` and `bisect` (and `plan --model hf://OWNER/REPO`, `build`,
`quality`): what the command line resolved, shared fields first, each command's own after them. The CLI builds it
in one helper (`cli._options`); `setup.prepare.prepare` and every command's entry take it as it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError
from ..core.paths import cache_home, data_home, default_db
from ..fit import budget


@dataclass(frozen=True)
class BisectTarget:
    """What `llamalab bisect` searches: the commits GOOD..BAD of a checkout, the figure it follows and the study's
    configuration it dry-runs."""

    repo: Path
    good: str
    bad: str
    metric: str = "compute_mib"
    build: str | None = None  # the study's build whose CMake options and arguments are used (default: the first)
    setting: str | None = None  # (default: the first)


@dataclass
class RunOptions:
    # shared: where llamalab keeps things, what it builds from and runs on
    home: Path = field(default_factory=cache_home)
    db: Path = field(default_factory=default_db)
    runs_dir: Path = field(default_factory=lambda: data_home() / "runs")
    llama_cpp: Path | None = None  # --llama-cpp (over [source] llama_cpp)
    model: Path | None = None  # --model, resolved to a local path (over [model])
    budgets_mib: list[int] | None = None  # --budget, parsed: replaces [devices] vram (study.spec.with_budgets)
    jobs: int | None = None  # build jobs (default: the CPU count)
    logs_dir: Path | None = None  # keep dry runs' logs here (default: a temporary folder, removed)
    timeout_s: float = 300.0  # each dry run's limit
    resume: str | None = None  # run and tune: the run to complete
    fresh: bool = False  # run and tune: never resume automatically (tune: and dry-run stage one again)
    # run only: what happens after the study's passes
    crosscheck: bool = False  # llama-bench on the first configuration, and wall vs server time
    max_context: str = "off"  # off | verify (load each fitted context again, fit off) | search (bisect -c upwards)
    max_context_probes: int = 6
    # the largest context within every device's budget, by dry runs (fit.budgetfit): auto (where llama.cpp's fit
    # failed or left a device over its budget) | always (every configuration of a budgeted study) | off
    budget_context: str = "auto"
    # plan only: the backend the figures are for (default: the one the dry runs use)
    target: str | None = None
    # plan --model hf://OWNER/REPO only: also the smallest budget each quant needs for this context
    context: int | None = None
    # tune only
    seconds: float | None = None  # stage two's time budget (overrides [tune] seconds)
    stage_one_only: bool = False  # the model is a header-only stand-in (a remote model without --download)
    # bisect only
    bisect: BisectTarget | None = None


def parse_budget_option(text: str | None, option: str = "--budget") -> list[int] | None:
    """`--budget 16GiB,12GiB` → [16384, 12288] (None without it): read once, where the command line is read."""
    if not text:
        return None
    try:
        return budget.parse_budgets(text)
    except ConfigError as e:
        raise ConfigError(f"{option} {text!r}: {e.message}", tip=e.tip) from None
