"""Not applicable vs failed: llama.cpp's own refusals read from real logs, and the rig's device count against an
arm's min_devices. Fixtures: tests/fixtures/applicability (sources in its SOURCES.md) and every ledger fixture log,
none of which is a refusal."""


import pytest

from llamalab.logs import applicability
from testpaths import FIXTURES

HERE = FIXTURES
FIX = HERE / "applicability"


def lines(name: str) -> list[str]:
    return (FIX / name).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("name, said", [
    ("cuda-b10524-row-split-buffers.log", "device CUDA0 does not support split buffers"),
    ("textgen-2026-05-tensor-arch.log", "LLAMA_SPLIT_MODE_TENSOR not implemented for architecture 'minimax-m2'"),
    ("rpc-b11312-sm-row.log", "device RPC0 does not support split buffers"),
    ("cpu-b11312-sm-tensor.log", "LLAMA_SPLIT_MODE_TENSOR needs >= 1 devices"),
])
def test_llama_cpp_refusals_are_read_in_its_own_words(name, said):
    assert applicability.refusal(lines(name)) == said


@pytest.mark.parametrize("name", ["cuda-rocm-b9890-tensor-no-fit.log", "rpc-b11312-sm-tensor.log"])
def test_tensor_split_without_fit_is_a_fit_refusal_not_a_load_refusal(name):
    log = lines(name)
    assert applicability.fit_refusal(log) == "llama_params_fit is not implemented for SPLIT_MODE_TENSOR"
    assert applicability.refusal(log) is None  # the model went on to load: the configuration applies


@pytest.mark.parametrize("path", sorted((HERE / "logs").glob("*.log")), ids=lambda p: p.stem)
def test_no_ledger_fixture_log_is_a_refusal(path):
    """Real logs of runs that loaded, failed for other reasons (out of memory, not a GGUF, an unknown flag) or ran
    `-sm row` on a ROCm build of 2025 that still had split buffers: none is "not applicable". Only the `-sm tensor`
    logs (tensor parallelism has no fit) carry a fit refusal."""
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    assert applicability.refusal(text) is None
    tensor = any("creating a Meta device for tensor parallelism" in line for line in text)
    assert applicability.fit_refusal(text) == (
        "llama_params_fit is not implemented for SPLIT_MODE_TENSOR" if tensor else None)


@pytest.mark.parametrize("needed, have, backend, expected", [
    (2, 2, "cuda", None),
    (2, 3, "cpu-rpc", None),
    (1, 1, "cpu", None),
    (2, 1, "cuda", "it needs at least 2 devices and this rig has 1 (cuda)"),
    (2, 1, "cpu", "it needs at least 2 devices and this rig has 1 (cpu, the host alone)"),
])
def test_too_few_devices(needed, have, backend, expected):
    assert applicability.too_few_devices(needed, have, backend) == expected


def test_a_long_hostile_line_is_cut_not_searched_whole():
    line = "x" * 100_000 + "device CUDA0 does not support split buffers"
    assert applicability.refusal([line]) is None  # past MAX_LINE: not read
    assert applicability.refusal([b"device CUDA1 does not support split buffers\xff"]) == \
        "device CUDA1 does not support split buffers"
