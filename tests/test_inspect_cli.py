"""`llamalab inspect`: JSON contract, stdin, and the human report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamalab.cli import cli

LOGS = Path(__file__).parent / "fixtures" / "logs"
FIXTURES = sorted(p.name[: -len(".expected.json")] for p in LOGS.glob("*.expected.json"))
CONTRACT = ("pipeline_parallel", "n_copies", "n_ctx", "graph_nodes", "graph_splits", "devices", "host")


def run(*args, input=None):
    result = CliRunner().invoke(cli, ["inspect", *args], input=input)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", FIXTURES)
def test_json_matches_the_expected_ledger(name):
    exp = json.loads((LOGS / f"{name}.expected.json").read_text())
    split = (exp.get("parse_args") or {}).get("tensor_split")
    out = json.loads(run("--json", *(["--tensor-split", ",".join(map(str, split))] if split else []),
                         str(LOGS / f"{name}.log")))
    for key in CONTRACT[:5]:
        assert out[key] == exp[key], key
    for side in ("devices", "host"):
        got = {n: {k: b[k] for k in ("model_mib", "kv_mib", "compute_mib", "output_mib")} for n, b in out[side].items()}
        assert got == exp[side]


def test_json_from_stdin():
    text = (LOGS / "rpc-b11312-copies4.log").read_text()
    out = json.loads(run("--json", "-", input=text))
    assert out["pipeline_parallel"] is True and out["n_copies"] == 4 and out["graph_splits"] == 3
    assert out["devices"]["RPC0[127.0.0.1:51711]"]["compute_mib"] == 48.10
    assert out["host"]["CPU"]["output_mib"] == 0.49
    assert out["one_copy_saving"]["estimate"] is True


def test_human_output_names_the_saving_in_mib_and_tokens():
    out = run(str(LOGS / "rpc-b11312-copies4.log"))
    assert "Pipeline parallelism: on, 4 copies, sched copies = 4" in out
    assert "ESTIMATED saving with one scheduler copy instead of 4" in out
    assert "RPC0[127.0.0.1:51711] 27.00 MiB" in out
    # 27 MiB would hold 5,727 tokens, but this log already runs the model's whole context
    flat = " ".join(out.split())
    assert "but no more context: this log already runs the model's whole context (n_ctx_train 8,192)" in flat
    assert "n_ctx_train = 8,192 (this is the model's limit" in flat and "more tokens of context" not in flat
    assert "basis:" in out and "estimate" in out
    for col in ("model", "KV", "compute", "output", "total"):
        assert col in out


@pytest.mark.parametrize("name,line,saving", [
    pytest.param("rpc-b11312-copies1", "Pipeline parallelism: on, 1 copy (no extra copies), sched copies = 1",
                 False, id="copies1"),
    pytest.param("rpc-b11312-fit-copies4", "then the fit FAILED", True, id="fit-failed"),
    pytest.param("cuda-2025-12-retry-without-pp-truncated", "Pipeline parallelism: DROPPED — llama.cpp set it up with "
                 "n_copies=4, its compute buffers did not fit", False, id="retry"),
    pytest.param("rpc-b11312-pp-dropped", "it then ran with sched copies = 1", False, id="dropped"),
    pytest.param("cuda-2024-03-pp4-truncated", "Pipeline parallelism: on, 4 copies, n_copies = 4", True, id="2024"),
    pytest.param("cuda-2025-fork-n_copies1", "Pipeline parallelism: on, 1 copy (no extra copies), n_copies = 1",
                 False, id="old-one-copy"),
    pytest.param("rocm-2025-05-sm-row", "Pipeline parallelism: unknown", False, id="unknown"),
    pytest.param("cpu-b11312-not-gguf", "not a GGUF file", False, id="not-gguf"),
    pytest.param("rpc-b11312-fit-reduced", "context size reduced from 8,192 to 3,840", True, id="fit"),
    pytest.param("vulkan-2025-08-compute-oom", "Allocation failed: Vulkan0 buffer of 4,536.75 MiB", False, id="oom"),
])
def test_human_output_states(name, line, saving):
    out = run(str(LOGS / f"{name}.log"))
    assert line in out
    assert ("ESTIMATED saving" in out) is saving


def test_tensor_split_option():
    plain = json.loads(run("--json", str(LOGS / "rpc-b11312-sm-tensor-ts31.log")))
    split = json.loads(run("--json", "--tensor-split", "3,1", str(LOGS / "rpc-b11312-sm-tensor-ts31.log")))
    assert plain["devices"]["RPC1[127.0.0.1:51812]"]["model_mib"] == 59.47  # equal shares: at most the printed
    assert split["devices"]["RPC1[127.0.0.1:51812]"]["model_mib"] == 19.82 and split["meta"]["shares_from"] == "-ts"
    result = CliRunner().invoke(cli, ["inspect", "--tensor-split", "a,b", str(LOGS / "rpc-b11312-sm-tensor.log")])
    assert result.exit_code != 0 and "not a list of numbers" in str(result.exception)


def test_empty_input_is_not_an_error():
    out = run("-", input="")
    assert "No buffer lines found" in out
    assert json.loads(run("--json", "-", input="hello\n"))["devices"] == {}


def test_missing_file_is_a_clean_error():
    result = CliRunner().invoke(cli, ["inspect", "/nonexistent/server.log"])
    assert result.exit_code != 0 and "Traceback" not in result.output
