"""Remote devices in a stored run: the ledger per remote device (keyed by rpc endpoint), what each endpoint runs,
whether pipeline parallelism was on, and speed against a run of the same study on loopback rpc-servers.
Pure: takes RunData, returns rows, dicts and text.
"""

from __future__ import annotations

from ...core import stats
from ...rig import remote
from ..data import RunData
from ..records import ConfigRecord
from . import compare, speed, tables


def _remotes_of(config: ConfigRecord) -> dict[str, dict]:
    """key (RPC0[host:port]) → the stored RemoteDevice of one configuration (configs.devices_json)."""
    dev = config.get("devices") or {}
    return {r["key"]: r for r in dev.get("remotes") or [] if r.get("key")}


def has_remotes(data: RunData) -> bool:
    """Whether the run used remote rpc-servers ([devices] rpc), not only llamalab's own loopback ones."""
    return any(_remotes_of(c) for c in data.configs)


def remote_devices(data: RunData) -> list[dict]:
    """One row per remote device per measured configuration: endpoint, backend, memory offered, ledger buffers."""
    rows = []
    for c in data.ok_configs():
        led = c.get("ledger") or {}
        offered = _remotes_of(c)
        for ep, devs in sorted(remote.ledger_by_endpoint(led).items()):
            for name, b in sorted(devs.items()):
                o = offered.get(f"{name}[{ep}]", {})
                rows.append({
                    "build": c["build"], "setting": c["setting"], "endpoint": ep, "device": name,
                    "backend": o.get("backend", "unknown"), "backend_source": o.get("backend_source", "unknown"),
                    "total_mib": o.get("total_mib"), "free_mib": o.get("free_mib"),
                    "model_mib": b.get("model_mib"), "kv_mib": b.get("kv_mib"), "compute_mib": b.get("compute_mib"),
                    "pipeline_parallel": led.get("pipeline_parallel"), "sched_copies": led.get("sched_copies"),
                })
    return rows


def versus_loopback(remote_run: RunData, loopback: RunData, threshold: float | None = None, *,
                    seed: int = 0) -> list[dict]:
    """Speed of the remote run against the loopback run (the baseline), per configuration, level and metric:
    ratio = median(remote) / median(loopback) with its bootstrap interval and verdict."""
    c = compare.compare(loopback, remote_run, threshold, seed=seed)
    out = []
    for cfg in c["configs"]:
        for s in cfg["speed"]:
            out.append({"build": cfg["build"], "setting": cfg["setting"], **s})
    return out


def sentences(rows: list[dict]) -> list[str]:
    out = []
    for s in rows:
        r = stats.Ratio(s["ratio"], s["ci_low"], s["ci_high"], s["n_a"], s["n_b"], s["confidence"])
        label = next((m.label for m in speed.METRICS if m.name == s["metric"]), s["metric"])
        where = "single stream" if s["concurrency"] == 1 else f"{s['concurrency']} parallel requests"
        out.append(f"{s['build']} × {s['setting']}, {label}, {where}: remote/loopback {stats.format_ratio(r)} "
                   f"({s['a_median']:,.2f} → {s['b_median']:,.2f}) — {s['verdict']}")
    return out


def _n(v) -> str:
    return "–" if v is None else (f"{v:,}" if isinstance(v, int) else f"{v:,.2f}")


def markdown(remote_run: RunData, loopback: RunData | None = None, threshold: float | None = None) -> str:
    rows = remote_devices(remote_run)
    out = [f"## Remote devices — run {remote_run.id}", ""]
    if not rows:
        out.append("This run has no remote (RPC) device in its ledgers.")
        return "\n".join(out) + "\n"
    head = ["Build", "Setting", "Endpoint", "Device", "Backend", "Offered (MiB)", "Model (MiB)", "KV (MiB)",
            "Compute (MiB)"]
    body = [[r["build"], r["setting"], r["endpoint"], r["device"],
             r["backend"] + (" (declared)" if r["backend_source"] == "declared" else ""),
             _n(r["total_mib"]), _n(r["model_mib"]), _n(r["kv_mib"]), _n(r["compute_mib"])] for r in rows]
    out += [tables.markdown_table(head, body), ""]
    pp = {(r["build"], r["setting"]): (r["pipeline_parallel"], r["sched_copies"]) for r in rows}
    for (b, s), (on, copies) in pp.items():
        state = "on" if on else ("off" if on is False else "unknown")
        out.append(f"- {b} × {s}: pipeline parallelism {state} (sched copies = {_n(copies)})")
    out.append("")
    if loopback is not None:
        lines = sentences(versus_loopback(remote_run, loopback, threshold))
        out += [f"## Speed over the network against loopback (run {loopback.id})", ""]
        out += [f"- {ln}" for ln in lines] or ["No configuration ran in both runs."]
        out.append("")
    return "\n".join(out)
