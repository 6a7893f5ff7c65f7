"""What every human-readable report says besides the table: the machine, what was not measured, the verdict lines
and how to reproduce each configuration. Plain strings; each renderer escapes them its own way.
"""

from __future__ import annotations

import shlex

from ...logs.applicability import NOT_APPLICABLE
from .. import records
from ..data import RunData
from ..records import BuildRecord, ConfigRecord
from . import speed, verdict


def model(data: RunData) -> dict:
    return data.model


def system_items(data: RunData) -> list[tuple[str, str]]:
    """(label, value) pairs describing where and with what the run happened."""
    s = data.system or {}
    r = data.run
    src = s.get("llama_cpp") or {}
    m = model(data)
    opts = r.get("options") or {}
    gpus = ", ".join(f"{g.get('name', '?')} ({g.get('total_mib') or 0:,} MiB)" for g in s.get("gpus") or []) or "none"
    items = [
        ("Run", f"{r['id']} — study {r['study']}, {r['status']}"),
        ("Started / finished", f"{r.get('started') or '?'} / {r.get('finished') or '–'}"),
        ("Host", str(r.get("host") or "?")),
        ("CPU", f"{s.get('cpu', '?')}, {s.get('cores', '?')} cores, {s.get('ram_mib') or 0:,} MiB RAM"),
        ("GPUs", gpus + (f"; driver {s['gpu_driver']}" if s.get("gpu_driver") else "")),
        ("OS", str(s.get("os", "?"))),
        ("llama.cpp", f"{src.get('version', '?')} ({(src.get('commit') or '?')[:9]}"
                      f"{', modified' if src.get('dirty') else ''}) "
                      + (f"given binaries in {src['origin'][4:]}" if str(src.get("origin", "")).startswith("bin:")
                         else f"from {src.get('origin', '?')}")),
        ("Backend", str(opts.get("backend", "?"))),
        ("Model", f"{m.get('name') or m.get('path') or '?'} ({m.get('architecture', '?')}, {m.get('n_layer', '?')} "
                  f"layers, {(m.get('size_bytes') or 0) / (1 << 20):,.0f} MiB, fingerprint "
                  f"{m.get('fingerprint', '?')})"),
        ("Software", f"llamalab {r.get('llamalab_version', '?')}, Python {s.get('python', '?')}"),
    ]
    for b in src.get("binaries") or []:
        items.append(("Binaries", binary_line(b, [x["name"] for x in data.builds
                                                   if (x.get("binary") or {}).get("dir") == b.get("dir")])))
    if s.get("loadavg"):
        items.append(("Load at start", ", ".join(f"{x:.2f}" for x in s["loadavg"])))
    return items


def not_applicable(data: RunData) -> list[dict]:
    """Each arm that does not apply to the rig, once: {build, settings (those it was ruled out for; all of the
    study's when `every_setting`), reason, by ("llama.cpp" where llama.cpp refused it at load, else "llamalab":
    the arm's min_devices)}. An arm ruled out for the same reason under several settings is one entry."""
    settings = verdict.study_settings(data)
    groups: dict[tuple[str, str], dict] = {}
    for c in data.configs:
        if c["status"] != NOT_APPLICABLE:
            continue
        reason = c.get("reason") or "no reason recorded"
        g = groups.setdefault((c["build"], reason), {"build": c["build"], "settings": [], "reason": reason})
        if c["setting"] not in g["settings"]:
            g["settings"].append(c["setting"])
    builds_seen = {b for b, _ in groups}
    for b in data.builds:  # a build ruled out with no configuration row (a run made by hand)
        if b["status"] == NOT_APPLICABLE and b["name"] not in builds_seen:
            reason = b.get("reason") or "no reason recorded"
            groups[(b["name"], reason)] = {"build": b["name"], "settings": list(settings), "reason": reason}
    out = []
    for g in groups.values():
        g["every_setting"] = set(settings) <= set(g["settings"])
        g["by"] = "llama.cpp" if g["reason"].startswith("llama.cpp:") else "llamalab"
        out.append(g)
    return out


def not_applicable_lines(data: RunData) -> list[str]:
    """One line per arm that does not apply to the rig, with its reason (llama.cpp's own words where it refused)."""
    out = []
    for g in not_applicable(data):
        where = g["build"] if g["every_setting"] else f"{g['build']} × {', '.join(g['settings'])}"
        out.append(f"{where}: not applicable on this rig — {g['reason']}")
    return out


def not_measured(data: RunData) -> list[str]:
    out = []
    for b in data.builds:
        if b["status"] not in ("ok", NOT_APPLICABLE):  # not-applicable arms have their own section
            out.append(f"build {b['name']}: {b['status']} — {b['reason'] or 'no reason recorded'}")
    for c in data.configs:
        if c["status"] == "failed":
            first = (c["reason"] or "").splitlines()[0] if c["reason"] else "unknown reason"
            out.append(f"{c['build']} × {c['setting']}: failed — {first}")
        elif c["status"] == "ok" and c.get("reason"):
            out.append(f"{c['build']} × {c['setting']}: {c['reason']}")
    return _once(out)


def _once(items: list) -> list:
    """Each item once, in order: an interleaved study loads a configuration once per pass, and passes that loaded
    the same way say the same thing."""
    seen, out = set(), []
    for x in items:
        key = repr(x)
        if key not in seen:
            seen.add(key)
            out.append(x)
    return out


def memory_lines(data: RunData) -> list[str]:
    from . import context

    rows = {(r["build"], r["setting"]): r for r in context.rows(data)}
    return verdict.memory_sentences(data, rows) + ledger_notes(data)


def ledger_notes(data: RunData) -> list[str]:
    """Per configuration that loaded, what its ledger needs said beside the figures: how -sm tensor's Meta()
    buffers were attributed to devices (and what the log cannot tell), pipeline parallelism that llama.cpp
    dropped, and figures read from an ollama log."""
    from ...logs.tensorsplit import meta_note

    out = []
    for c in data.ok_configs():
        led = c.get("ledger") or {}
        where = f"{c['build']} × {c['setting']}"
        if led.get("meta"):
            out.append(f"{where}: {meta_note(led['meta'])}")
        if why := verdict.pp_dropped(led):
            out.append(f"{where}: llama.cpp DROPPED pipeline parallelism (\"compute buffer allocation failed, retrying "
                       f"without pipeline parallelism\"; {why}): it ran with pipeline parallelism off, whatever its "
                       "build's copies, and is no pipeline arm in a comparison of copies.")
        if led.get("wrapper") == "ollama":
            out.append(f"{where}: read from an ollama log (its own memory summaries print sizes to 0.1 MiB/GiB).")
    return _once(out)


def split_rows(data: RunData) -> list[dict]:
    """Per configuration that loaded: graph splits (prompt / one-token batches), scheduler copies, and each device's
    compute and KV buffers — where a backend that cannot run an op hands it to the CPU, the splits and the copies of
    their inputs show it (the q8_0 question of the Vulkan study)."""
    from ..data import compute_by_label, device_labels, device_names, host_by_type, host_compute
    from . import tables

    out = []
    order = tables.config_order(data)
    for c in sorted(data.configs, key=lambda c: (order.get((c["build"], c["setting"]), 1 << 30), c["id"])):
        led = c.get("ledger") or {}
        if c.get("status") != "ok" or led.get("graph_splits") is None:
            continue
        names = device_names(led)
        kv = {lab: led["devices"][n].get("kv_mib") for lab, n in zip(device_labels(names), names)}
        out.append({"build": c["build"], "setting": c["setting"], "splits": led.get("graph_splits"),
                    "splits_tg": led.get("graph_splits_tg"), "copies": led.get("sched_copies"),
                    "compute_mib": compute_by_label(led), "kv_mib": kv, "compute_host_mib": host_compute(led),
                    "host_mib": host_by_type(led), "input_mib": verdict.input_total(led), "n_ctx": led.get("n_ctx")})
    return out


def split_table(data: RunData) -> tuple[list[str], list[list[str]]] | None:
    """The split_rows as a table (None where no ledger has graph splits)."""
    from .tables import format_cell

    rows = split_rows(data)
    if not rows:
        return None
    devs = list(dict.fromkeys(k for r in rows for k in r["compute_mib"]))
    hosts = list(dict.fromkeys(k for r in rows for k in r["host_mib"]))
    inputs = any(r["input_mib"] is not None for r in rows)
    head = (["Build", "Setting", "Graph splits (batch / 1 token)", "Copies"] + [f"Compute {d} (MiB)" for d in devs]
            + ["Compute host (MiB)"] + [f"KV {d} (MiB)" for d in devs] + [f"Host {h} (MiB)" for h in hosts]
            + (["Input buffers (MiB)"] if inputs else []) + ["Context (tokens)"])
    body = []
    for r in rows:
        splits = (f"{r['splits']} / {r['splits_tg']}" if r["splits_tg"] not in (None, r["splits"])
                  else format_cell(r["splits"]))
        body.append([r["build"], r["setting"], splits, format_cell(r["copies"]),
                     *[format_cell(r["compute_mib"].get(d)) for d in devs], format_cell(r["compute_host_mib"]),
                     *[format_cell(r["kv_mib"].get(d)) for d in devs],
                     *[format_cell(r["host_mib"].get(h)) for h in hosts],
                     *([format_cell(r["input_mib"])] if inputs else []), format_cell(r["n_ctx"])])
    return head, _once(body)


def speed_lines(data: RunData) -> list[str]:
    return speed.sentences(data)


def key_speed_lines(data: RunData) -> list[str]:
    """The speed verdicts a reader needs first: generation t/s of one stream, and aggregate output t/s at every
    parallel level (the full list, with prompt speed, TTFT and ITL, is in the reports)."""
    grid = len(data.cells) > 1
    return [speed.sentence(c, grid) for c in speed.comparisons(data)
            if (c["metric"] == "output_tps" and c["concurrency"] == 1)
            or (c["metric"] in ("aggregate_output_tps", "aggregate_input_tps") and c["concurrency"] > 1)]


def study_cmake_of(data: RunData, name: str) -> dict:
    return dict(data.build_spec(name).cmake or {})


def cmake_flags(build: BuildRecord, study_cmake: dict | None = None) -> str:
    """The -D options a build added to llama.cpp's defaults ("(defaults)" when none). A build that was never made
    stored none: the study's own `cmake` table says what it would have been."""
    opts = build.get("options")
    if opts is None:
        opts = study_cmake or {}
    if not opts:
        return "(defaults)"
    return cmake_defs(opts)


def cmake_defs(opts: dict) -> str:
    """CMake options as `cmake` takes them: "-DGGML_BLAS=ON -DGGML_SCHED_MAX_COPIES=1" (True/False as ON/OFF)."""
    return " ".join(f"-D{k}={_cm(v)}" for k, v in opts.items())


def _cm(v) -> str:
    if isinstance(v, bool):
        return "ON" if v else "OFF"
    return str(v)


def server_flags(config: ConfigRecord) -> str:
    """llama-server's arguments for a configuration, without the binary and model paths."""
    args = records.server_argv(config)[1:]
    if len(args) >= 2 and args[0] == "-m":
        args = args[2:]
    return shlex.join(str(a) for a in args)


def reproduce(data: RunData) -> list[dict]:
    """Per measured configuration: build, setting, CMake flags, server flags and environment that matters."""
    builds = {b["name"]: b for b in data.builds}
    out = []
    for c in data.ok_configs():
        env = c.get("env") or {}
        out.append({"build": c["build"], "setting": c["setting"],
                    "cmake": cmake_flags(builds.get(c["build"], {}), study_cmake_of(data, c["build"])),
                    "server": server_flags(c),
                    "env": " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(env.items()))})
    return _once(out)


def binary_line(b: dict, builds: list[str] | None = None) -> str:
    """One folder of given binaries: version, commit, compiler, backends, where, and the builds that ran it."""
    line = f"{b.get('version') or 'unknown'} ({(b.get('commit') or '?')[:9]})"
    if b.get("compiler"):
        line += f", built with {b['compiler']} for {b.get('target') or '?'}"
    line += f"; backends {', '.join(b.get('backends') or []) or 'not reported'}; {b.get('dir', '?')}"
    if builds:
        line += f" (build{'s' if len(builds) > 1 else ''} {', '.join(builds)})"
    return line


def build_items(data: RunData) -> list[dict]:
    """Each build of the run: name, the study's label, status, the CMake options it added, the llama.cpp it ran
    (a source it was built from, or given binaries) and build time."""
    out = []
    for b in data.builds:
        secs = b.get("build_seconds")
        given = b.get("binary")
        source = (f"{b['source_version']} ({(b.get('source_commit') or '?')[:9]})" if b.get("source_version")
                  else "–")
        if given:
            source += f" binaries in {given.get('dir', '?')}"
        elif (origin := str(b.get("source_origin") or "")).startswith("dir:"):
            source += f" built from {origin[4:]}"
        out.append({"name": b["name"], "label": data.build_label(b["name"]), "status": b["status"],
                    "reason": b.get("reason"),
                    "cmake": "(given binaries)" if given else cmake_flags(b, study_cmake_of(data, b["name"])),
                    "source": source,
                    "build": "given, not built" if given else ("reused" if b.get("reused") else
                                                               (f"{secs:,.0f} s" if secs else "–"))})
    return out


def binary_notes(data: RunData) -> list[str]:
    """Which build ran on which binary, when the measured builds did not all run the same llama.cpp binaries."""
    where: dict[str, list[str]] = {}
    for b in data.builds:
        if b["status"] != "ok":
            continue
        given = b.get("binary")
        key = (f"given binaries {given.get('version', '?')} ({(given.get('commit') or '?')[:9]}) in "
               f"{given.get('dir', '?')}" if given else
               f"a build of {b.get('source_version') or '?'} ({(b.get('source_commit') or '?')[:9]}) from "
               f"{b.get('source_origin') or '?'}")
        where.setdefault(key, []).append(b["name"])
    if len(where) < 2:
        return []
    return ["the builds ran different llama.cpp binaries, so their differences include the binaries' own: "
            + "; ".join(f"{', '.join(names)} on {k}" for k, names in where.items())]


def fidelity_lines(data: RunData) -> list[str]:
    """How far the figures can be trusted: llama-bench and client-vs-server timing crosschecks, and NVML's view of
    each GPU next to the ledger (the difference is shown as unaccounted, never hidden)."""
    from ...llamacpp import crosscheck
    from ...run import nvmlcheck

    out = []
    for row in data.tables.get("crosschecks", []):
        result = row.get("result") or {}
        where = f"{row['build']} × {row['setting']}"
        out += [f"{where}: {line}" for line in crosscheck.sentences(result)]
        if row.get("error"):
            out.append(f"{where}: {row['error']}")
    for c in data.ok_configs():  # once per build × setting (interleaved repeats restart the server each time)
        nv = c.get("nvml")
        if nv:
            for line in nvmlcheck.sentences(nv.get("after_workload") or nv.get("after_load") or []):
                out.append(f"{c['build']} × {c['setting']}: {line}")
    return _once(out)


BUSY_CORES = 0.25  # other processes using more than this many cores during a trial make its speed suspect


def noise_lines(data: RunData) -> list[str]:
    """A warning when other processes used the CPU while trials ran (trials.foreign_load, in cores)."""
    loads = [x for t in data.trials if (x := t.get("foreign_load")) is not None]
    busy = [x for x in loads if x > BUSY_CORES]
    if not busy:
        return []
    loads.sort()
    return [f"other processes used the CPU during {len(busy)} of {len(loads)} trials (median "
            f"{loads[len(loads) // 2]:.2f} cores, max {loads[-1]:.2f}): speed figures from this run are noisier than "
            "the machine allows; rerun on an idle machine before trusting small differences."]
