"""Per-device memory budgets → llama.cpp fit arguments (budget.py, pure)."""


import pytest

from llamalab.core.errors import ConfigError
from llamalab.fit import budget
from llamalab.fit.budget import DeviceMemory
from llamalab.llamacpp import argv
from llamalab.logs import devicelist
from llamalab.logs.devicelist import DeviceMemory
from testpaths import FIXTURES

FIX = FIXTURES / "fitparams"


@pytest.mark.parametrize("text, mib", [
    pytest.param("16GiB", 16384, id="GiB"),
    pytest.param("16 GiB", 16384, id="space"),
    pytest.param("16G", 16384, id="G-is-binary"),
    pytest.param("16g", 16384, id="lower-case"),
    pytest.param("12000MiB", 12000, id="MiB"),
    pytest.param("12000", 12000, id="bare-number-is-MiB"),
    pytest.param("1.5GiB", 1536, id="fraction"),
    pytest.param("16GB", 15258, id="GB-is-decimal"),
    pytest.param("1TiB", 1048576, id="TiB"),
    pytest.param("512KiB", 0, id="below-a-MiB-rounds-down"),
    pytest.param(300, 300, id="int"),
])
def test_parse_size(text, mib):
    assert budget.parse_size(text) == mib


@pytest.mark.parametrize("text", ["", "GiB", "16 gigs", "-1GiB", "16GiBs", "1e3MiB"])
def test_parse_size_rejects(text):
    with pytest.raises(ConfigError, match="not a memory size") as e:
        budget.parse_size(text)
    assert "16GiB" in e.value.tip


@pytest.mark.parametrize("value, out", [
    pytest.param("16GiB,12GiB", [16384, 12288], id="comma-string"),
    pytest.param(["16GiB", "12GiB"], [16384, 12288], id="list"),
    pytest.param(["16GiB,12GiB"], [16384, 12288], id="list-of-comma-string"),
    pytest.param(["300MiB"], [300], id="one"),
])
def test_parse_budgets(value, out):
    assert budget.parse_budgets(value) == out


def test_parse_budgets_empty():
    with pytest.raises(ConfigError, match="no memory budget"):
        budget.parse_budgets("")


def test_parse_devices_from_list_devices_output():
    # real `llama-server --rpc A,B --list-devices` output (b11312), see fixtures/fitparams/README.md
    devs = devicelist.parse_devices((FIX / "list-devices-cpu-rpc.txt").read_text().splitlines())
    assert [(d.name, d.total_mib, d.free_mib) for d in devs] == [("RPC0", 24105, 24105), ("RPC1", 24105, 24105)]
    assert devs[0].description.startswith("127.0.0.1:")


def test_parse_devices_drops_blas_and_cpu():
    devs = devicelist.parse_devices((FIX / "list-devices-cpu-rpc-blas.txt").read_text().splitlines())
    assert [d.name for d in devs] == ["RPC0", "RPC1"]


def test_parse_devices_from_a_server_log():
    lines = (FIX / "server-dry-no-pp-blas-kv-f16-f16-c36352.log").read_text().splitlines()
    assert [(d.name, d.description) for d in devicelist.parse_devices(lines)] == [
        ("RPC0", "127.0.0.1:59093"), ("RPC1", "127.0.0.1:54719")]


def test_parse_devices_cuda_line():
    lines = ["Available devices:", "  CUDA0: NVIDIA H200 (143156 MiB, 142500 MiB free)",
             "  CUDA1: NVIDIA H200 (143156 MiB, 142000 MiB free)"]
    devs = devicelist.parse_devices(lines)
    assert devs == [DeviceMemory("CUDA0", "NVIDIA H200", 143156, 142500),
                    DeviceMemory("CUDA1", "NVIDIA H200", 143156, 142000)]


TWO = [DeviceMemory("RPC0", "127.0.0.1:1", 24105, 24105), DeviceMemory("RPC1", "127.0.0.1:2", 24105, 24000)]


def test_emulate_arithmetic():
    # fitt_i = free_i − budget_i + margin_i: this device stops where the budgeted one would
    emu = budget.emulate([16384, 12288], TWO)
    assert emu.fit_targets_mib == (24105 - 16384 + 1024, 24000 - 12288 + 1024)
    assert emu.margins_mib == (1024, 1024)
    assert emu.args() == ["-fitt", "8745,12736", "-ts", "16384,12288"]


def test_emulate_with_study_margin_and_one_budget_for_all():
    emu = budget.emulate([300], TWO, margins_mib=[64])
    assert emu.budgets_mib == (300, 300)
    assert emu.fit_targets_mib == (24105 - 300 + 64, 24000 - 300 + 64)


def test_emulate_keeps_the_studys_tensor_split():
    emu = budget.emulate([16384, 12288], TWO, user_args=["-fa", "on", "-ts", "1,1"])
    assert emu.tensor_split is None and "-ts" not in emu.args()


def test_emulate_one_device_needs_no_split():
    emu = budget.emulate([16384], TWO[:1])
    assert emu.args() == ["-fitt", str(24105 - 16384 + 1024)]


@pytest.mark.parametrize("budgets, margins, match", [
    pytest.param([16384, 12288, 8192], None, "3 memory budget", id="count-mismatch"),
    pytest.param([30000, 12288], None, "cannot be emulated on RPC0.*24105 MiB free", id="larger-than-free"),
    pytest.param([1024, 4096], None, "not more than the 1024 MiB", id="budget-within-margin"),
    pytest.param([16384, 12288], [64, 64, 64], "3 fit margins", id="margin-count"),
])
def test_emulate_refuses(budgets, margins, match):
    with pytest.raises(ConfigError, match=match) as e:
        budget.emulate(budgets, TWO, margins_mib=margins)
    assert e.value.tip


def test_emulate_without_devices():
    with pytest.raises(ConfigError, match="reported none"):
        budget.emulate([16384], [])


@pytest.mark.parametrize("args, extra, out", [
    pytest.param(["-fa", "on"], ["-fitt", "1,2"], ["-fa", "on", "-fitt", "1,2"], id="append"),
    pytest.param(["-fitt", "64", "-np", "4"], ["-fitt", "1,2"], ["-np", "4", "-fitt", "1,2"], id="replace"),
    pytest.param(["--fit-target", "64", "-ts", "1,1"], ["-fitt", "9", "-ts", "3,2"], ["-fitt", "9", "-ts", "3,2"],
                 id="long-names"),
])
def test_with_args(args, extra, out):
    assert argv.replaced(args, extra) == out
