"""`llamalab plan`'s pure parts: dry-run logs → figures, §5.1 expectations, the copies' cost, fit-params output,
header-only stand-ins, and the dry-run vs full-load comparison. Fixtures: real b11312 output (see
tests/fixtures/fitparams/README.md)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from llamalab.core.errors import ModelError
from llamalab.llamacpp.build import BuildArtifact
from llamalab.llamacpp.source import Source
from llamalab.logs import dryrun
from llamalab.models import gguf, standin
from llamalab.models import synthetic as models
from llamalab.plan import check as plancheck
from llamalab.plan import plan
from llamalab.report.views import plan as plan_view
from llamalab.setup import configplan
from testpaths import FIXTURES

FIX = FIXTURES / "fitparams"


def lines(name: str) -> list[str]:
    return (FIX / name).read_text().splitlines()


def figures(dr: dryrun.DryRun) -> dict:
    return {d.name: (d.model_mib, d.context_mib, d.compute_mib) for d in [*dr.devices, dr.host]}


@pytest.mark.parametrize("fixture, n_ctx, reduced, copies, pp, expect", [
    pytest.param("server-dry-tiny8k-copies4-kv-f16-q8_0.log", 8192, None, 4, True,
                 {"RPC0": (30, 30.62, 48.10), "RPC1": (49, 18.38, 52.10), "Host": (31, 0, 37.11)},
                 id="copies4-no-budget"),
    pytest.param("server-dry-copies4-kv-f16-q8_0-fit.log", 4096, (65536, 24576), 4, True,
                 # the fit measured twice (65536, then 4096): the figures are the last measurement's
                 {"RPC0": (30, 15.31, 32.10), "RPC1": (49, 9.19, 36.10), "Host": (31, 0, 21.11)},
                 id="copies4-fit-shrinks-context"),
    pytest.param("server-dry-copies4-kv-f16-q8_0-c24576.log", 24576, None, 4, True,
                 {"RPC0": (30, 91.88, 112.10), "RPC1": (49, 55.12, 116.10), "Host": (31, 0, 101.11)},
                 id="copies4-at-fitted-context"),
    pytest.param("server-dry-copies1-kv-f16-q8_0.log", 65536, None, 1, True,
                 {"RPC0": (30, 245.0, 75.03), "RPC1": (49, 147.0, 76.03), "Host": (31, 0, 66.03)},
                 id="copies1-enabled-line-one-copy"),
    pytest.param("server-dry-no-pp-blas-kv-f16-f16-c36352.log", 36352, None, 1, False,
                 # the host's CPU compute buffer prints twice (CPU and BLAS backends share it): counted once
                 {"RPC0": (30, 177.5, 47.51), "RPC1": (49, 106.5, 46.51), "Host": (31, 0, 37.51)},
                 id="blas-no-pp-shared-host-buffer"),
    pytest.param("server-dry-no-pp-override-kv-f16-q8_0.log", 65536, None, 1, False,
                 {"RPC0": (30, 245.0, 75.03), "RPC1": (49, 147.0, 76.03), "Host": (31, 0, 66.03)},
                 id="tensor-override-no-pp"),
])
def test_parse_dry_run(fixture, n_ctx, reduced, copies, pp, expect):
    dr = dryrun.parse_dry_run(lines(fixture))
    assert dr.error is None and dr.finished
    assert dr.n_ctx == n_ctx
    assert (dr.fit_ctx_from, dr.fit_ctx_to) == (reduced or (None, None))
    assert (dr.sched_copies, dr.pipeline_parallel) == (copies, pp)
    assert figures(dr) == {k: tuple(float(x) for x in v) for k, v in expect.items()}
    assert (dr.n_seq_max, dr.kv_unified, dr.n_ubatch, dr.n_embd) == (4, True, 512, 512)
    assert [d.name for d in dr.devices] == ["RPC0", "RPC1"]
    assert all(d.free_mib == 24105 for d in dr.devices)


def test_host_buffer_types_beside_host_are_kept_not_dropped():
    """Issue 18: llama.cpp's table lists buffer types that ggml does not call host buffers (CPU_REPACK, AMX) on
    rows of their own; they are system RAM, not a device. The real Gemma 3 270M Q4_K_M dry run: 7 MiB of repacked
    weights."""
    dr = dryrun.parse_dry_run(lines("server-dry-gemma3-270m-cpu-repack.log"))
    assert [d.name for d in dr.devices] == ["RPC0", "RPC1"]
    assert [(h.name, h.model_mib, h.context_mib, h.compute_mib) for h in dr.host_buffers] == [
        ("CPU_REPACK", 7.0, 0.0, 0.0)]
    assert (dr.host.model_mib, dr.host.context_mib) == (198.0, 26.0)
    cp = _cp("gemma", "kv", 1, 4096, [21.02, 21.02], 24.27)
    cp.host_buffers = dr.host_buffers
    p = plan.Plan(study="demo", backend="cpu-rpc", target="cpu-rpc", model={}, model_standin=False, llama_cpp="b1",
                  configs=[cp], skipped={}, copies_costs=[], seconds=1.0)
    from rich.console import Console

    con = Console(width=250, record=True)
    con.print(plan_view.render(p))
    text = con.export_text()
    assert "CPU_REPACK (host)" in text and "7 / 0 / 0" in text
    assert p.to_json()["configs"][0]["host_buffers"][0]["used_mib"] == 7.0


def test_parse_dry_run_keys_rpc_buffers_by_endpoint():
    # both RPC devices' buffers print as RPC0[host:port]; here RPC1's endpoint is printed first
    dr = dryrun.parse_dry_run(lines("server-dry-no-pp-blas-kv-f16-f16-c36352.log"))
    assert {d.name: d.description for d in dr.devices} == {"RPC0": "127.0.0.1:59093", "RPC1": "127.0.0.1:54719"}
    assert [d.kv_layers for d in dr.devices] == [5, 3]


def test_parse_dry_run_fit_messages():
    dr = dryrun.parse_dry_run(lines("server-dry-copies4-kv-f16-q8_0-fit.log"))
    assert dr.fit_ok is False and "n_gpu_layers already set" in dr.fit_message
    assert dr.measurements == 2 and dr.n_ctx_train == 65536


@pytest.mark.parametrize("text, error", [
    pytest.param("", "stopped before its memory fit", id="empty"),
    pytest.param("error: invalid argument: --bogus\n", "unsupported flag", id="bad-flag"),
])
def test_parse_dry_run_failures(text, error):
    assert error in dryrun.parse_dry_run(text.splitlines()).error


def test_parse_dry_run_cut_before_the_table():
    all_lines = lines("server-dry-copies1-kv-f16-q8_0.log")
    cut = next(i for i, ln in enumerate(all_lines) if "memory breakdown" in ln)
    dr = dryrun.parse_dry_run(all_lines[:cut])
    assert dr.error and not dr.devices


def test_parse_fit_print():
    assert dryrun.parse_fit_print(lines("fit-params-fitp-tiny-copies4-kv-f16-q8_0.txt")) == {
        "RPC0": (30, 30, 48), "RPC1": (49, 18, 103), "Host": (31, 0, 37)}
    # -np 4 without -kvu (which fit-params refuses): 4 KV streams, other compute graphs
    assert dryrun.parse_fit_print(lines("fit-params-fitp-np4-tiny-copies4-kv-f16-q8_0.txt"))["RPC1"] == (49, 18, 79)
    assert "invalid argument: -kvu" in (FIX / "fit-params-kvu-rejected.txt").read_text()


def test_fit_params_args_drops_server_only_flags():
    assert plan.fit_params_args(["-fa", "on", "-np", "4", "-kvu", "--host", "0.0.0.0", "--metrics", "-c", "512"]) == [
        "-fa", "on", "-np", "4", "-c", "512"]


@pytest.mark.parametrize("args, n_dev, options, pp, copies, why", [
    pytest.param(["-ngl", "999"], 2, {}, True, 4, "2 devices", id="default"),
    pytest.param(["-ngl", "999"], 2, {"GGML_SCHED_MAX_COPIES": "1"}, True, 1, "COPIES=1", id="copies1"),
    pytest.param(["-ngl", "999"], 1, {}, False, 1, "one device", id="one-device"),
    pytest.param(["-ngl", "999"], 2, {"GGML_BLAS": "ON"}, False, 1, "BLAS", id="blas"),
    pytest.param(["-ngl", "999", "-sm", "row"], 2, {}, False, 1, "-sm row", id="split-row"),
    pytest.param(["-ngl", "999", "--split-mode=none"], 2, {}, False, 1, "-sm none", id="split-none-inline"),
    pytest.param(["-ngl", "999", "-nkvo"], 2, {}, False, 1, "-nkvo", id="nkvo"),
    pytest.param(["-ngl", "999", "-ot", "x=CPU"], 2, {}, False, 1, "overrides", id="override"),
    pytest.param(["--cpu-moe"], 2, {}, False, 1, "overrides", id="cpu-moe"),
    pytest.param(["-ngl", "8"], 2, {}, False, 1, "output layer", id="ngl-equals-layers"),
    pytest.param(["-ngl", "9"], 2, {}, True, 4, "2 devices", id="ngl-above-layers"),
    pytest.param([], 2, {}, True, 4, "2 devices", id="ngl-unset"),
])
def test_expected_pipeline(args, n_dev, options, pp, copies, why):
    e = configplan.expected_pipeline(args, n_dev, 8, options)
    assert (e.pipeline_parallel, e.copies) == (pp, copies)
    assert why in e.reason


def _art(name: str, options: dict) -> BuildArtifact:
    src = Source(path=Path("/x"), origin="test", build_number=1, commit="c" * 40)
    return BuildArtifact(name=name, key=name, source=src, backend="cpu-rpc", options=options, bin_dir=Path("/x"))


def _cp(build, setting, copies, n_ctx, computes, host):
    return configplan.ConfigPlan(build=build, setting=setting, status="ok", n_ctx=n_ctx, sched_copies=copies,
                                 devices=[dryrun.DeviceFigures(name=f"RPC{i}", compute_mib=c)
                                          for i, c in enumerate(computes)],
                                 host=dryrun.DeviceFigures(name="Host", compute_mib=host))


def test_copies_costs_pairs_builds_that_differ_in_copies_only():
    arts = {"copies4": _art("copies4", {}), "copies1": _art("copies1", {"GGML_SCHED_MAX_COPIES": "1"}),
            "blas": _art("blas", {"GGML_BLAS": "ON"}), "override": _art("override", {})}
    plans = [_cp("copies4", "kv", 4, 8192, [48.10, 48.10], 37.11), _cp("copies1", "kv", 1, 8192, [19.03, 19.03], 10.03),
             _cp("blas", "kv", 1, 8192, [19.03, 19.03], 10.03), _cp("override", "kv", 1, 8192, [19.0, 19.0], 10.0)]
    costs = plan.copies_costs(plans, arts, {"override": ["-ot", "x=CPU"]})
    assert len(costs) == 1
    c = costs[0]
    assert (c.build, c.baseline, c.copies, c.n_ctx_delta) == ("copies4", "copies1", 4, 0)
    assert c.devices_mib == {"RPC0": 29.07, "RPC1": 29.07} and c.host_mib == 27.08 and c.total_mib == 85.22


def test_copies_costs_compares_at_the_same_context():
    arts = {"copies4": _art("copies4", {}), "copies1": _art("copies1", {"GGML_SCHED_MAX_COPIES": "1"})}
    c4 = _cp("copies4", "kv", 4, 17920, [198.1, 230.1], 110.11)
    c1 = _cp("copies1", "kv", 1, 19712, [107.28, 115.28], 35.28)
    assert plan.copies_costs([c4, c1], arts) == []  # contexts differ and no measurement at 17920
    at = {("copies1", "kv", 17920): _cp("copies1", "kv", 1, 17920, [105.53, 113.53], 33.53)}
    (c,) = plan.copies_costs([c4, c1], arts, None, at)
    assert c.n_ctx_delta == 1792 and c.at_n_ctx == 17920
    assert c.devices_mib == {"RPC0": 92.57, "RPC1": 116.57} and c.host_mib == 76.58


def test_plan_json_and_render():
    p = plan.Plan(study="demo", backend="cpu-rpc", target="cuda", model={}, model_standin=True, llama_cpp="b1",
                  configs=[_cp("copies4", "kv", 4, 8192, [48.1, 52.1], 37.11)], skipped={"no-pp-blas": "no OpenBLAS"},
                  copies_costs=[], seconds=1.0)
    d = p.to_json()
    assert d["basis"] == {"model": "portable", "context": "portable", "compute": "approx", "n_ctx": "approx"}
    assert d["configs"][0]["devices"][1]["used_mib"] == 52.1
    from rich.console import Console

    con = Console(width=200, record=True)
    con.print(plan_view.render(p))
    text = con.export_text()
    assert "~52.1" in text and "no OpenBLAS" in text and "approximations" in text
    p.target = "cpu-rpc"
    assert plan.Plan.basis(p)["compute"] == "target"


def test_render_reads_a_failed_fit_as_failed_and_names_one_copy_in_the_common_words():
    """The dry run of the H200 study's copies1 configuration: the fit reduced the context, then failed (-ngl is
    given). The n_ctx column must not say "(fit)" as if it had worked."""
    failed = _cp("copies1", "kv", 1, 20224, [107.3, 115.3], 35.3)
    failed.pipeline_parallel, failed.ctx_reduced_from = True, 65536  # llama.cpp printed "enabled" with one copy
    failed.fit_ok, failed.fit_message = False, "n_gpu_layers already set by user to 999, abort"
    fine = _cp("copies4", "kv", 4, 18176, [198.1, 230.1], 110.1)
    fine.pipeline_parallel, fine.ctx_reduced_from, fine.fit_ok = True, 65536, True
    off = _cp("no-pp", "kv", 1, 20224, [107.3, 115.3], 35.3)
    p = plan.Plan(study="demo", backend="cpu-rpc", target="cpu-rpc", model={}, model_standin=False, llama_cpp="b1",
                  configs=[fine, failed, off], skipped={}, copies_costs=[], seconds=1.0)
    from rich.console import Console

    con = Console(width=250, record=True)
    con.print(plan_view.render(p))
    text = con.export_text()
    assert "20224 (fit failed)" in text and "18176 (fit)" in text and "20224 (fit)" not in text
    assert "llama.cpp's fit FAILED in 1 configuration(s) (n_gpu_layers already set by user to 999, abort)" in text
    assert "on, 4 copies" in text and "on, 1 copy (no extra copies)" in text and "on ×" not in text
    assert p.to_json()["configs"][1]["fit_ok"] is False


# ---------------------------------------------------------------- dry run vs full load


def test_load_figures_and_compare_on_a_real_pair():
    dry = dryrun.parse_dry_run(lines("server-dry-copies4-kv-f16-q8_0-c24576.log"))
    full = plancheck.load_figures(lines("server-full-copies4-kv-f16-q8_0-c24576.log"))
    assert full.devices == {"RPC0": {"model": 30.02, "context": 91.88, "compute": 112.10},
                            "RPC1": {"model": 49.26, "context": 55.12, "compute": 112.10}}
    assert (full.n_ctx, full.sched_copies) == (24576, 4)
    cp = configplan.ConfigPlan(build="copies4", setting="kv", status="ok", n_ctx=dry.n_ctx,
                               sched_copies=dry.sched_copies, devices=dry.devices, host=dry.host,
                               n_ubatch=dry.n_ubatch, n_embd=dry.n_embd)
    rows = {(r.where, r.figure): r for r in plancheck.compare(cp, full)}
    assert all(r.ok for k, r in rows.items() if k != ("RPC1", "compute"))
    # the second device's compute: the dry run counts 4 MiB more (n_copies × n_ubatch × n_embd × 4 B)
    assert rows[("RPC1", "compute")].diff == 4.0 == plancheck.input_copies_mib(cp)
    data = plancheck.to_json([plancheck.Result(cp, full, list(rows.values()))], {"backend": "cpu-rpc", "label": "x"})
    md = plancheck.markdown(data)
    assert "| copies4 | kv | RPC1 | compute | 116.10 | 112.10 | +4 | **no** |" in md
    assert "| compute | later devices | 0/1 | 4.00 |" in plancheck.summary_markdown(data)
    cross = {(r["where"], r["figure"]): r for r in plancheck.cross_rows(data, data)}  # devices matched by position
    assert cross[("device 0", "compute")]["error"] == 0.0 and cross[("device 1", "compute")]["error"] == 4.0
    assert cross[("device 1", "compute")]["error_pct"] == 3.6


def test_blas_pair_host_compute_counted_once():
    dry = dryrun.parse_dry_run(lines("server-dry-no-pp-blas-kv-f16-f16-c36352.log"))
    full = plancheck.load_figures(lines("server-full-no-pp-blas-kv-f16-f16-c36352.log"))
    assert dry.host.compute_mib == full.host["compute"] == 37.51


# ---------------------------------------------------------------- header-only stand-ins

SMALL = models.ModelShape("t", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=600, n_ctx_train=512)


def test_layout_of_a_synthetic_model(tmp_path):
    full = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    lay = gguf.read_layout(full)
    assert lay.file_size == full.stat().st_size and lay.n_tensors == 2 * 9 + 3 and lay.alignment == 32
    hdr = gguf.read_header(full)
    assert hdr.kv["llama.block_count"] == 2 and len(hdr.kv["tokenizer.ggml.tokens"]) == 600


def test_stand_in_from_a_prefix_is_the_header_only_model(tmp_path):
    full = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    header_only = models.write_synthetic(SMALL, tmp_path / "h.gguf", data=False)
    prefix = tmp_path / "head.gguf"
    prefix.write_bytes(full.read_bytes()[: gguf.read_layout(full).data_offset + 100])
    assert not standin.is_complete(prefix)
    out, made = standin.ensure(prefix, tmp_path / "home")
    assert made and out.read_bytes() == header_only.read_bytes()
    assert out.stat().st_blocks * 512 < out.stat().st_size
    assert standin.ensure(prefix, tmp_path / "home") == (out, True)  # cached
    assert standin.ensure(full, tmp_path / "home") == (full, False)  # complete files are used as they are
    assert models.read_info(out).n_layer == 2


def test_stand_in_needs_the_whole_header(tmp_path):
    full = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    prefix = tmp_path / "head.gguf"
    prefix.write_bytes(full.read_bytes()[:2000])
    with pytest.raises(ModelError, match="header continues") as e:
        standin.ensure(prefix, tmp_path)
    assert "head -c" in e.value.tip


def test_stand_in_refuses_non_gguf(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ModelError, match="not a GGUF"):
        standin.write(p, tmp_path / "y.gguf")


def test_read_info_of_a_prefix_says_truncated_and_how_to_plan(tmp_path):
    full = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    prefix = tmp_path / "head.gguf"
    prefix.write_bytes(full.read_bytes()[: gguf.read_layout(full).data_offset + 10])
    with pytest.raises(ModelError, match="truncated") as e:
        models.read_info(prefix)
    assert "llamalab plan --model" in e.value.tip


def test_cli_stub(tmp_path):
    from llamalab.cli import cli

    full = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    out = tmp_path / "stub.gguf"
    res = CliRunner().invoke(cli, ["stub", str(full), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size == full.stat().st_size
    head = gguf.read_layout(full).data_offset
    assert out.read_bytes()[:head] == full.read_bytes()[:head]
