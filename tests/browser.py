"""Debian's Chromium, headless, for the browser tests: where it is (`LLAMALAB_CHROMIUM` overrides) and how it runs
(its own profile and home under the test's folder, no network services, no GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def _chromium() -> str | None:
    env = os.environ.get("LLAMALAB_CHROMIUM")
    if env:
        return env
    return shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


CHROMIUM = _chromium()
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--mute-audio", "--disable-extensions", "--disable-dev-shm-usage"]


def argv(tmp_path: Path, *args: str) -> list[str]:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]


def chromium(tmp_path: Path, *args: str, timeout: float = 180) -> str:
    argv_ = argv(tmp_path, *args)
    done = subprocess.run(argv_, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-2000:]}"
    return done.stdout
