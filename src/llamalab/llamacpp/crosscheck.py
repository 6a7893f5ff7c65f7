"""Fidelity check: do llamalab's speeds agree with llama-bench on the same binary and settings, and does the
client's wall time agree with the server's own timings?

llama-bench measures prompt processing (`-p N -n 0`) and generation after a prompt of N tokens (`-n M -d N`),
which is what a llamalab trial measures through llama-server.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import proc
from . import flags


def bench_args(server_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(llama-bench arguments, server arguments that have no llama-bench equivalent): each server flag by its
    `flags` entry (any spelling, `=value` forms included), its llama-bench flag where it has one; server-only flags
    that do not change one stream's speed, or that llama-bench sets itself, left out."""
    out: list[str] = []
    untranslated: list[str] = []
    i = 0
    args = list(server_args)
    while i < len(args):
        a = args[i]
        f = flags.flag(a)
        if f is None or not (f.bench or f.bench_skip):
            untranslated.append(a)
            i += 1
            continue
        inline = "=" in a
        val = a.partition("=")[2] if inline else (args[i + 1] if i + 1 < len(args) else "")
        i += 1 if inline or not f.takes_value else 2
        if f.bench:
            out += [f.bench, f.bench_value if f.bench_value is not None else val]
    return out, untranslated


def bench_argv(binary: Path, model: Path, server_args: Sequence[str], *, prompt: int, gen: int, reps: int
               ) -> tuple[list[list[str]], list[str]]:
    """Two llama-bench runs: prompt processing of `prompt` tokens, and `gen` tokens at depth `prompt`."""
    common, untranslated = bench_args(server_args)
    base = [str(binary), "-m", str(model), "-r", str(reps), "-o", "json", *common]
    return [base + ["-p", str(prompt), "-n", "0"], base + ["-p", "0", "-n", str(gen), "-d", str(prompt)]], untranslated


def parse_bench_json(text: str) -> list[dict[str, Any]]:
    """llama-bench `-o json` output (a JSON list, possibly after log lines) → its test records."""
    start = text.find("[")
    end = text.rfind("]")
    if start < 0 or end < start:
        return []
    try:
        data = json.loads(text[start:end + 1])
    except ValueError:
        return []
    return [d for d in data if isinstance(d, dict)]


def compare(bench: list[dict[str, Any]], trials: list[dict[str, Any]]) -> dict[str, Any]:
    """llama-bench's averages against llamalab's single-stream medians, and client wall vs server timings."""
    pp = next((b for b in bench if b.get("n_prompt", 0) > 0 and b.get("n_gen", 0) == 0), None)
    tg = next((b for b in bench if b.get("n_gen", 0) > 0), None)
    single = [t for t in trials if t["concurrency"] == 1 and not t.get("errors")]
    ins = [t["input_tps"] for t in single if t.get("input_tps")]
    outs = [t["output_tps"] for t in single if t.get("output_tps")]
    overheads = []
    for t in single:
        for r in t.get("requests", []):
            if r.get("wall_s") and r.get("prompt_ms") is not None and r.get("predicted_ms") is not None:
                server_s = (r["prompt_ms"] + r["predicted_ms"]) / 1000.0
                overheads.append((r["wall_s"] - server_s, server_s))
    res: dict[str, Any] = {"bench": bench}
    if pp and ins:
        res["input_tps"] = _pair(statistics.median(ins), pp.get("avg_ts"), pp.get("stddev_ts"))
    if tg and outs:
        res["output_tps"] = _pair(statistics.median(outs), tg.get("avg_ts"), tg.get("stddev_ts"))
    if overheads:
        res["client_overhead_ms"] = round(statistics.median(o for o, _ in overheads) * 1000, 2)
        res["client_overhead_pct"] = round(100 * statistics.median(o / s for o, s in overheads if s > 0), 2)
    return res


def _pair(llamalab: float, bench: float | None, bench_sd: float | None) -> dict[str, Any]:
    d = {"llamalab": round(llamalab, 2), "llama_bench": None if bench is None else round(bench, 2),
         "llama_bench_stddev": None if bench_sd is None else round(bench_sd, 2)}
    if bench:
        d["difference_pct"] = round(100 * (llamalab - bench) / bench, 2)
    return d


def run_bench(argvs: list[list[str]], log_path: Path, env: dict[str, str]) -> tuple[list[dict[str, Any]], str | None]:
    """Run llama-bench; returns its records and an error message (None when it worked)."""
    records: list[dict[str, Any]] = []
    for argv in argvs:
        rc, out = proc.capture(argv, timeout_s=1800, env=env)
        with open(log_path, "a") as f:
            f.write(" ".join(argv) + "\n" + out + "\n")
        if rc != 0:
            return records, f"llama-bench exited with {rc}; see {log_path}"
        records += parse_bench_json(out)
    return records, None


def sentences(result: dict[str, Any]) -> list[str]:
    lines = []
    for key, what in (("input_tps", "prompt t/s"), ("output_tps", "generation t/s")):
        if key in result and result[key].get("llama_bench") is not None:
            p = result[key]
            lines.append(f"{what}: llamalab {p['llamalab']:,.2f} vs llama-bench {p['llama_bench']:,.2f} "
                         f"± {p['llama_bench_stddev'] or 0:,.2f} ({p.get('difference_pct', 0):+.2f}%)")
    if "client_overhead_ms" in result:
        lines.append(f"client wall time exceeds the server's own timings by {result['client_overhead_ms']:.2f} ms "
                     f"per request ({result['client_overhead_pct']:.2f}%) — HTTP, JSON and streaming overhead")
    return lines
