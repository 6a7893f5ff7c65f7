"""Hostile sizes (issue 26): time and peak memory of llamalab's commands on inputs as large as a user or an attacker
can make them. The script makes every input itself, runs the real `llamalab` command line on each in a child process
and reads that child's CPU time, wall time and peak RSS from the kernel (`os.wait4` for its CPU time, its own /proc
VmHWM for its peak RSS). It prints a Markdown table and writes it, with the machine it ran on, to results.md beside it.

    .venv/bin/python benchmarks/hostile-sizes/run.py                 # everything (a few minutes on 2 cores)
    .venv/bin/python benchmarks/hostile-sizes/run.py --trials 8000   # a smaller run
    .venv/bin/python benchmarks/hostile-sizes/run.py --only inspect

The bounds are those of issue 26's "done when": import and report of 128,000 trials each under 30 s and 500 MB;
`llamalab inspect` under 1 s per MB and 200 MB RSS on any log (100 MB of short lines, 1 MB of each padded line the
issue found, 100 MB of random bytes).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "runs" / "demo-grid.json"  # a real grid run: 144 trials, 9 configurations
MB = 10**6


# ---------------------------------------------------------------- inputs

def big_export(n_trials: int, path: Path) -> Path:
    """The real demo-grid run with its trials repeated (trial numbers shifted, so every key stays unique) up to
    `n_trials`: what a grid study with many repeats stores."""
    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    trials = doc["tables"]["trials"]
    per_round = max(t["trial"] for t in trials)
    out = []
    k = 0
    while len(out) < n_trials:
        for t in trials:
            if len(out) == n_trials:
                break
            t2 = copy.copy(t)
            t2["id"] = len(out) + 1
            t2["trial"] = t["trial"] + k * per_round
            out.append(t2)
        k += 1
    doc["tables"]["trials"] = out
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    return path


def short_lines(path: Path, size: int) -> Path:
    """`size` bytes of short llama-server-like lines (one buffer line in every 64)."""
    block = "".join("llama_context: CUDA0 compute buffer size = 1.00 MiB\n" if i % 64 == 0 else f"slot {i}: ok\n"
                    for i in range(4096))
    with open(path, "w") as f:
        written = 0
        while written < size:
            f.write(block)
            written += len(block)
    return path


def padded(path: Path, marker: str, size: int, pad: int = 8150) -> Path:
    """The issue's reproduction: `marker` + `pad` blanks + `x`, repeated up to `size` bytes."""
    line = marker + " " * pad + "x\n"
    path.write_text(line * max(1, size // len(line)))
    return path


def random_bytes(path: Path, size: int) -> Path:
    rng = random.Random(26)
    with open(path, "wb") as f:
        for _ in range(size // MB):
            f.write(rng.randbytes(MB))
    return path


# ---------------------------------------------------------------- measuring

@dataclass
class Measured:
    what: str
    input_mb: float
    cpu_s: float
    wall_s: float
    rss_mb: float
    rc: int
    bound: str
    ok: bool
    tracebacks: int


# `llamalab ARGV`, then the process's own peak RSS (VmHWM: the high-water mark of its memory after exec; a fork's
# rusage maxrss would count the memory of this script it was copied from)
_MEASURED = ("import sys\nfrom llamalab import cli\nrc = cli.entry(sys.argv[1:])\n"
             "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM'))\n"
             "sys.stderr.write('\\nVmHWM ' + hwm.split()[1] + '\\n')\nsys.exit(rc)\n")


def measure(what: str, argv: list[str], input_mb: float, max_s: float | None, max_rss_mb: float | None,
            bound: str) -> Measured:
    """Run `llamalab ARGV` as a child: its CPU time from its rusage (`os.wait4`), its peak RSS from its own VmHWM.
    Without bounds (None) the row is a figure for the record: it counts as within when the command succeeds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", _MEASURED, *argv], stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        errtext, _, kib = err.read().decode("utf-8", "replace").rpartition("\nVmHWM ")
        text = out.read().decode("utf-8", "replace") + errtext
    cpu = ru.ru_utime + ru.ru_stime
    rss = int(kib) / 1024
    ok = p.returncode == 0 and (max_s is None or wall < max_s) and (max_rss_mb is None or rss < max_rss_mb)
    m = Measured(what, input_mb, cpu, wall, rss, p.returncode, bound, ok, text.count("Traceback"))
    print(f"{what}: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:.0f} MB peak RSS, exit {p.returncode}"
          + ("" if ok else "  <-- over the bound or failed") + ("" if p.returncode == 0 else "\n" + text[-2000:]),
          flush=True)
    return m


def table(rows: list[Measured]) -> str:
    head = ("| input | size (MB) | wall (s) | CPU (s) | peak RSS (MB) | exit | bound | within |\n"
            "|---|---:|---:|---:|---:|---:|---|---|\n")
    return head + "".join(f"| {m.what} | {m.input_mb:.1f} | {m.wall_s:.2f} | {m.cpu_s:.2f} | {m.rss_mb:.0f} | {m.rc} | "
                          f"{m.bound} | {'yes' if m.ok else 'NO'} |\n" for m in rows)


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    mem = next((int(ln.split()[1]) // 2**20 for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")), 0)
    load = os.getloadavg()
    return (f"{os.cpu_count()} cores ({cpu}), {mem} GiB RAM, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}; load average at the end {load[0]:.2f} / {load[1]:.2f} / "
            f"{load[2]:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=128_000)
    ap.add_argument("--short-mb", type=int, default=100)
    ap.add_argument("--random-mb", type=int, default=100)
    ap.add_argument("--only", choices=["runs", "inspect"], default=None)
    ap.add_argument("--out", type=Path, default=HERE / "results.md")
    ap.add_argument("--keep", type=Path, default=None, help="make the inputs in this folder and keep them")
    a = ap.parse_args()
    rows: list[Measured] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        env_db = work / "results.db"
        if a.only in (None, "runs"):
            if env_db.exists():
                env_db.unlink()
            exp = big_export(a.trials, work / f"export-{a.trials}.json")
            size = exp.stat().st_size / MB
            n = f"{a.trials:,}"
            rows.append(measure(f"import, {n} trials", ["import", str(exp), "--db", str(env_db)], size, 30, 500,
                                "< 30 s, < 500 MB"))
            rows.append(measure(f"report (Markdown), {n} trials", ["report", "--db", str(env_db), "-o",
                                                                  str(work / "r.md")], size, 30, 500,
                                "< 30 s, < 500 MB"))
            rows.append(measure(f"export, {n} trials", ["export", "--db", str(env_db), "-o", str(work / "e.json")],
                                size, 30, 500, "< 30 s, < 500 MB"))
            notes.append(f"The export it wrote is {(work / 'e.json').stat().st_size / MB:.0f} MB (one row a line); "
                         f"the input, in the layout of 68344b3's exports (json.dumps, indent=1), {size:.0f} MB.")
            rid = json.loads(subprocess.run([sys.executable, "-m", "llamalab.cli", "runs", "--json", "--db",
                                             str(env_db)], capture_output=True, text=True).stdout)[0]["id"]
            rows.append(measure(f"compare, {n} trials a side", ["compare", rid, rid, "--db", str(env_db)], size,
                                None, None, "(for the record)"))
            for fmt in ("html", "csv", "json"):
                rows.append(measure(f"report ({fmt.upper()}), {n} trials",
                                    ["report", "--db", str(env_db), "--format", fmt, "-o", str(work / f"r.{fmt}")],
                                    size, None, None, "(for the record)"))
        if a.only in (None, "inspect"):
            cases = [
                ("inspect, short lines", short_lines(work / "short.log", a.short_mb * MB)),
                ("inspect, 'graph splits' + 8,150 blanks", padded(work / "gs.log", "graph splits", MB)),
                ("inspect, 'llama_kv_cache: size = 1 MiB' + 8,150 blanks",
                 padded(work / "kv.log", "llama_kv_cache: size = 1 MiB", MB)),
                ("inspect, random bytes", random_bytes(work / "random.log", a.random_mb * MB)),
            ]
            for what, path in cases:
                size = path.stat().st_size / MB
                rows.append(measure(what, ["inspect", str(path)], size, max(1.0, size), 200,
                                    "< 1 s per MB, < 200 MB"))
    text = table(rows)
    print("\n" + text)
    tracebacks = sum(m.tracebacks for m in rows)
    a.out.write_text("# Hostile sizes: results\n\n`" + " ".join(["python", "benchmarks/hostile-sizes/run.py",
                                                               *sys.argv[1:]]) + "`\n\n" + text
                     + "".join(f"\n{n}\n" for n in notes)
                     + f"\nMachine: {machine()}.\n\n'Traceback' in the outputs: {tracebacks}.\n")
    return 0 if all(m.ok for m in rows) and not tracebacks else 1


if __name__ == "__main__":
    sys.exit(main())
