"""The runtime way to turn pipeline parallelism off without moving a weight, proved from real llama.cpp logs.

llama.cpp turns pipeline parallelism off whenever a tensor override is given (llama-context.cpp requires
`!model.has_tensor_overrides()`, which llama-model.cpp sets from the first -ot pattern, matched or not), so
`-ot no_such_tensor=CPU` turns it off and moves nothing. `-ot token_embd\\.weight=CPU` moves nothing on a model with
its own output tensor (the synthetic model), but on a model with tied embeddings (Gemma 3 270M, fetched from PyPI
and cached) token_embd is also the output layer, and the override moves it from the last device to the host (one
more graph split: the output matmul on the CPU).

Each study: CPU + two local rpc-servers, the default build, three arms (baseline, token_embd, no-op), one trial.
"""

from __future__ import annotations

import pytest

from llamahelp import run_study
from llamalab.report import data as rdata
from llamalab.report.analysis import verdict
from llamalab.report.data import device_labels, device_names
from llamalab.setup.progress import Progress

pytestmark = pytest.mark.llama

ARMS = [
    'builds=[{name="copies4"},{name="token-embd",args=["-ot","token_embd\\\\.weight=CPU"]},'
    '{name="no-op",args=["-ot","no_such_tensor=CPU"]}]',
    'settings=[{name="c2048",args=["-c","2048","-fit","off"]}]',
    "server.fit_target_mib=[]", "devices.vram=[]",
    "workload.repeats=1", "workload.prompt_tokens=32", "workload.output_tokens=8", "workload.warmup=0",
    "workload.concurrency=[1]", 'workload.output="natural"',
]


class Trials(Progress):
    def __init__(self):
        self.shown: list[tuple[int, int]] = []

    def trial(self, k: int, n: int, label: str) -> None:
        self.shown.append((k, n))


@pytest.mark.parametrize("which", ["synthetic", "gemma"])
def test_no_op_override_moves_nothing_and_token_embd_moves_the_tied_output(demo_prep, llama_home, tmp_path, which,
                                                                            request):
    model = request.getfixturevalue("gemma") if which == "gemma" else None
    shown = Trials()
    store, rid = run_study(llama_home, tmp_path, ARMS, progress=shown, model=model)
    led = {c["build"]: c["ledger"] for c in store.configs(rid)}
    assert {c["build"]: c["status"] for c in store.configs(rid)} == dict.fromkeys(led, "ok")
    assert shown.shown == [(1, 3), (2, 3), (3, 3)]  # each trial announced once, server restarts included

    # pipeline parallelism: on with 4 copies by default, off with either override
    assert (led["copies4"]["pipeline_parallel"], led["copies4"]["sched_copies"]) == (True, 4)
    for arm in ("token-embd", "no-op"):
        assert (led[arm]["pipeline_parallel"], led[arm]["sched_copies"]) == (False, 1), arm

    # the report's own comparison (each arm against copies4) and its words
    data = rdata.load(store, rid)
    mem = {c["candidate"]: c for c in verdict.memory_comparisons(data)}
    said = {c: next(x for x in verdict.memory_sentences(data) if x.startswith(f"c2048: {c} vs copies4")) for c in mem}

    # the no-op: every device's and the host's model buffer exactly as without it, the same graph
    assert mem["no-op"]["weights_moved"] == [] and "model buffers unchanged on every device" in said["no-op"]
    assert led["no-op"]["graph_splits"] == led["copies4"]["graph_splits"]
    moved = {m["where"]: m for m in mem["token-embd"]["weights_moved"]}
    if which == "synthetic":
        assert moved == {}  # its own output.weight: token_embd was on the host already
        assert led["token-embd"]["graph_splits"] == led["copies4"]["graph_splits"]
        return
    # Gemma: the output layer (token_embd, tied) left the last device, and the output matmul runs on the host: one
    # more graph split. The host's model buffers do not shrink; they grow only where the CPU backend repacks the
    # tensor into a buffer of its own (AMX); otherwise the output reads the copy the input embedding already has.
    last = device_labels(device_names(led["copies4"]))[-1]
    assert set(moved) in ({last}, {last, "host"}), moved
    assert moved[last]["to_mib"] < moved[last]["from_mib"] / 2  # the 262k-token output matrix was most of it
    assert "host" not in moved or moved["host"]["to_mib"] > moved["host"]["from_mib"]
    assert led["token-embd"]["graph_splits"] == led["copies4"]["graph_splits"] + 1
    assert f"WEIGHTS MOVED: {last} model {moved[last]['from_mib']:,.2f} → {moved[last]['to_mib']:,.2f} MiB" in \
        said["token-embd"] and "not a no-op" in said["token-embd"]
