"""ik_llama.cpp's logs read exactly: every figure of the ledger of each ik fixture (tests/fixtures/logs/ik-*,
sources in SOURCES.md) against the log's own lines, read here independently of the ledger (plain string splits of
the lines the log prints once per load), and every figure the ledger holds accounted for: read from a line, or
derived by a stated rule, or said to be missing (`not_printed`), never guessed."""

from __future__ import annotations

import re

import pytest

from llamalab.logs import failures, iklines, ledger
from llamalab.logs import inspect as inspect_view
from llamalab.logs.ledger import pp_label_of
from testpaths import FIXTURES

LOGS = FIXTURES / "logs"
IK = sorted(p.name.removesuffix(".expected.json") for p in LOGS.glob("ik-*.expected.json"))
FLOAT = r"(-?\d+(?:\.\d+)?)"


def lines_of(name: str) -> list[str]:
    return (LOGS / f"{name}.log").read_text().splitlines()


def own_figures(lines: list[str]) -> dict:
    """What the log itself says, one load's lines read with plain patterns: the buffers per name and kind, the KV
    summary, the context's values, the graph, the slots, ik's placement, and whether a PP line was printed."""
    got: dict = {"bufs": {}, "ctx": {}, "fit_layers": {}, "pp_line": False, "slot": None}
    kinds = {"llm_load_tensors:": ("model", r"(\S+) buffer size\s*=\s*" + FLOAT),
             "llama_kv_cache_init:": ("kv", r"(\S+) KV buffer size\s*=\s*" + FLOAT),
             "llama_init_from_model:": (None, r"(\S+)\s+(output|compute) buffer size\s*=\s*" + FLOAT)}
    for line in lines:
        head = line.split(" ", 1)[0]
        if head in kinds and "buffer size" in line:
            kind, pat = kinds[head]
            m = re.search(pat, line)
            name, k, mib = (m.group(1), kind, m.group(2)) if kind else (m.group(1), m.group(2), m.group(3))
            got["bufs"].setdefault(name, {})[k] = float(mib)
        elif m := re.match(r"llama_init_from_model: KV self size\s+=\s+" + FLOAT + r" MiB, K \((\w+)\):\s+" + FLOAT
                           + r" MiB, V \((\w+)\):\s+" + FLOAT, line):
            got["kv"] = (float(m.group(1)), m.group(2), float(m.group(3)), m.group(4), float(m.group(5)))
        elif m := re.match(r"llama_init_from_model: (n_ctx|n_batch|n_ubatch|flash_attn)\s+=\s+(\d+)$", line):
            got["ctx"][m.group(1)] = int(m.group(2))
        elif m := re.match(r"llama_init_from_model: graph (nodes|splits)\s+=\s+(\d+)$", line):
            got["graph_" + m.group(1)] = int(m.group(2))
        elif m := re.search(r"offloaded (\d+)/(\d+) layers to GPU", line):
            got["offloaded"] = (int(m.group(1)), int(m.group(2)))
        elif m := re.search(r"n_ctx_slot=(\d+)", line):
            got["slot"] = int(m.group(1))
        elif m := re.match(r"Setting default device in layer\s+(\d+) to (\d+)$", line):
            got["fit_layers"][int(m.group(1))] = int(m.group(2))
        elif m := re.match(r"Memory (required|available)\D+(\d+) MiB$", line):
            got["fit_" + m.group(1)] = int(m.group(2))
        elif m := re.match(r"Free memory \d+ MiB on device \d+ is less the (\d+) MiB safety margin", line):
            got["fit_margin"] = int(m.group(1))
        elif m := re.match(r"llm_load_print_meta: (n_ctx_train|n_embd|n_layer)\s+=\s+(\d+)\s*$", line):
            got[m.group(1)] = int(m.group(2))
        got["pp_line"] = got["pp_line"] or "pipeline parallelism enabled" in line
    return got


@pytest.mark.parametrize("name", IK)
def test_every_ledger_figure_is_the_logs_own(name):
    lines = lines_of(name)
    own, led = own_figures(lines), ledger.parse(lines)
    js = led.to_json()
    # every buffer, device or host, kind by kind: the ledger holds exactly what the log printed
    printed = {n: {k: v for k, v in kinds.items()} for n, kinds in own["bufs"].items()}
    held = {n: {k.removesuffix("_mib"): v for k, v in b.items() if v is not None and k != "total_mib"}
            for t in ("devices", "host") for n, b in js[t].items()}
    assert held == printed
    assert set(js["devices"]) == {n for n in printed if n.startswith("RPC")} and set(js["host"]) <= {"CPU"}
    size, kt, km, vt, vm = own["kv"]
    assert (led.kv.size_mib, led.kv.k_type, led.kv.k_mib, led.kv.v_type, led.kv.v_mib) == (size, kt, km, vt, vm)
    assert led.kv.buffers == {n: b["kv"] for n, b in printed.items() if "kv" in b}
    ctx = own["ctx"]
    assert (led.n_ctx, led.n_batch, led.n_ubatch, led.flash_attn) == (ctx["n_ctx"], ctx["n_batch"], ctx["n_ubatch"],
                                                                       bool(ctx["flash_attn"]))
    assert (led.graph_nodes, led.graph_splits) == (own["graph_nodes"], own["graph_splits"])
    assert (led.graph_nodes_tg, led.graph_splits_tg) == (own["graph_nodes"], own["graph_splits"])  # one graph
    assert (led.layers_offloaded, led.layers_total) == own["offloaded"]
    assert (led.n_ctx_train, led.n_embd, led.n_layer) == (own["n_ctx_train"], own["n_embd"], own["n_layer"])
    # derived by stated rules, each from the log's own figures
    assert led.kv.total_cells == ctx["n_ctx"]  # `KV self size` has no cells: the cache has n_ctx
    assert led.n_ctx_seq == own["slot"]  # ik's `n_ctx_slot`, where the server printed its slots
    # ik's placement, as printed
    fit = led.engine_fit
    assert (fit.margin_mib, fit.required_mib, fit.available_mib) == (own["fit_margin"], own["fit_required"],
                                                                     own["fit_available"])
    assert fit.layer_device == [own["fit_layers"][i] for i in sorted(own["fit_layers"])]
    assert fit.warnings and all(w in lines for w in fit.warnings)


@pytest.mark.parametrize("name", IK)
def test_what_its_log_does_not_say_is_said_not_guessed(name):
    lines = lines_of(name)
    own, led = own_figures(lines), ledger.parse(lines)
    assert led.engine == "ik_llama.cpp" and led.errors == []
    # no copies line in any form: none is invented, and the ledger says why and what it concludes
    assert led.sched_copies is None and led.pp_enabled_copies is None and led.n_copies is None
    assert not own["pp_line"] and led.pipeline_parallel is False and pp_label_of(led.to_json()) == "off"
    assert led.not_printed["sched_copies"] == iklines.NO_COPIES
    assert set(led.not_printed) >= {"breakdown", "kv_unified", "kv_layers", "fit_ctx", "n_seq_max"}
    assert led.kv_unified is None and led.n_seq_max is None and led.kv.layers is None
    assert not led.breakdown_final and not led.breakdown_projected and led.fit_ctx_to is None
    text = inspect_view.render(led)
    assert "ik_llama.cpp" in text and "not printed" in text


def test_its_device_order_is_its_own_numbering_not_the_buffer_lines_order():
    """Its model buffers print the second rpc-server first; `using device` lines give its order (--rpc's)."""
    led = ledger.parse(lines_of("ik-rpc-copies4-fa-off"))
    assert list(led.devices) == ["RPC0[127.0.0.1:54577]", "RPC0[127.0.0.1:39637]"]  # as the buffer lines came
    from llamalab.logs.order import device_names
    assert device_names(led.to_json()) == ["RPC0[127.0.0.1:39637]", "RPC0[127.0.0.1:54577]"]
    assert led.engine_fit.layer_device == [1, 1, 1, 1, 1, 1, 1, 2, 2]  # its device 1 is the first rpc-server


def test_a_pipeline_parallel_line_is_read_where_it_prints_one():
    """ik_llama.cpp prints `pipeline parallelism enabled (n_copies=N)` on a CUDA build (src/llama.cpp): the
    ledger takes its copies from it, as from llama.cpp's older line."""
    lines = lines_of("ik-rpc-copies4-fa-off")
    i = next(k for k, ln in enumerate(lines) if ln.startswith("llama_init_from_model: graph nodes"))
    led = ledger.parse([*lines[:i], "llama_init_from_model: pipeline parallelism enabled (n_copies=4)", *lines[i:]])
    assert led.pipeline_parallel is True and led.n_copies == 4 and "sched_copies" not in led.not_printed


def test_a_load_cut_before_its_context_ended_says_nothing_of_pipeline_parallelism():
    lines = lines_of("ik-rpc-copies1-context-search")
    cut = [ln for ln in lines if "graph" not in ln]
    led = ledger.parse(cut)
    assert led.engine == "ik_llama.cpp" and led.pipeline_parallel is None and "sched_copies" not in led.not_printed


def test_the_crash_is_read_on_both_sides():
    led = ledger.parse(lines_of("ik-rpc-copies1-fa-crash"))
    assert led.failure.startswith("an rpc-server crashed (") and "Remote RPC server crashed" in led.failure
    rpc = failures.failure_reason(lines_of("ik-rpc-server-fa-assert.rpc"))
    assert rpc.startswith("llama.cpp crashed (assertion or signal)") and "GGML_ASSERT(S > 0) failed" in rpc


def test_llama_cpp_logs_are_not_taken_for_ik():
    for p in sorted(LOGS.glob("rpc-b11312-*.log"))[:4]:
        led = ledger.parse(p.read_text().splitlines())
        assert led.engine is None and led.engine_fit is None and led.not_printed == {}
