"""Progress hooks: the runner reports through these; tests and pipes use the silent one."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from ..core.safetext import markup, plain, rich_text

if TYPE_CHECKING:
    from rich.progress import TaskID


class Progress:
    """Silent progress: every hook does nothing. Subclass to show something."""

    def message(self, text: str) -> None: ...

    def warn(self, text: str) -> None: ...

    def build(self, what: str, done: int, total: int) -> None: ...

    def build_done(self) -> None: ...

    def trial(self, k: int, n: int, label: str) -> None: ...

    def download(self, what: str, done: int, total: int) -> None:
        """Bytes of a model downloaded so far (`--download`)."""

    def close(self) -> None: ...


class StderrProgress(Progress):
    """Plain lines on stderr (for logs and non-terminals); results alone go to stdout."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._last_build = 0.0

    def _p(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {plain(text)}", file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        self._p(text)

    def warn(self, text: str) -> None:
        self._p(f"warning: {text}")

    def build(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last_build > 15 or done == total:
            self._last_build = now
            self._p(f"{what}: {done}/{total}")

    def trial(self, k: int, n: int, label: str) -> None:
        self._p(f"trial {k}/{n}: {label}")

    def download(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last_build > 15 or done == total:
            self._last_build = now
            self._p(f"{what}: {done / 2**20:,.1f} of {total / 2**20:,.1f} MiB")


class RichProgress(Progress):
    """A live rich display on a terminal: build progress bar with elapsed time; trial k of n with time left."""

    def __init__(self, console=None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RP

        self.console = console or Console(stderr=True)
        self.rp = RP(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                     TextColumn("left"), TimeRemainingColumn(), console=self.console, transient=False)
        self.rp.start()
        self._build_task: TaskID | None = None
        self._build_what: str | None = None
        self._trial_task: TaskID | None = None
        self._downloads: dict[str, TaskID] = {}

    def message(self, text: str) -> None:
        self.console.log(rich_text(text))  # never markup: messages carry labels, paths and log lines

    def warn(self, text: str) -> None:
        self.console.log(rich_text("warning: ", "yellow") + rich_text(text))

    def build(self, what: str, done: int, total: int) -> None:
        if self._build_task is None or self._build_what != what:
            self._build_task = self.rp.add_task(markup(f"build {what}"), total=total)
            self._build_what = what
        self.rp.update(self._build_task, completed=done, total=total)

    def build_done(self) -> None:
        self._build_task = None

    def download(self, what: str, done: int, total: int) -> None:
        if what not in self._downloads:
            self._downloads[what] = self.rp.add_task(markup(what), total=total)
        self.rp.update(self._downloads[what], completed=done, total=total)

    def trial(self, k: int, n: int, label: str) -> None:
        if self._trial_task is None:
            self._trial_task = self.rp.add_task("trials", total=n)
        self.rp.update(self._trial_task, completed=k - 1, total=n, description=markup(f"trial {k}/{n} {label}"))

    def close(self) -> None:
        if self._trial_task is not None:
            self.rp.update(self._trial_task, completed=self.rp.tasks[-1].total)
        self.rp.stop()
