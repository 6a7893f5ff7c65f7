"""The output check's logits (quality/logits.py): a configuration's llama-server arguments as llama-perplexity takes
them (pure), and a comparison that cannot run is stored with its reason and said as it happens (the run goes on)."""

from __future__ import annotations

import dataclasses

import pytest

from llamalab.core.records import ConfigOutcome
from llamalab.quality import logits
from llamalab.setup.progress import Progress
from llamalab.store.db import Store


def test_server_only_flags_are_left_out_with_why():
    args = ["-fa", "on", "-ngl", "999", "-np", "4", "-kvu", "-cram", "0", "--port", "8080", "-c", "8192",
            "--batch-size", "2048", "-ctv", "q8_0", "--metrics", "--no-op-offload"]
    kept, dropped = logits.perplexity_args(args, set())
    assert kept == ["-fa", "on", "-ngl", "999", "-ctv", "q8_0", "--no-op-offload"]
    assert dropped == [
        "-np: slots are llama-server's: llama-perplexity evaluates one sequence per chunk",
        "-kvu: slots are llama-server's (a unified KV cache of one sequence is the same)",
        "-cram: llama-server's prompt cache in host memory",
        "--port: llama-server's port",
        "-c: the check evaluates chunks of 256 tokens",
        "--batch-size: the check evaluates chunks of 256 tokens",
        "--metrics: llama-server's /metrics",
    ]


def test_flags_this_llama_perplexity_does_not_list_are_left_out_and_said():
    """`known`: the flags its --help lists; one it lacks is dropped (with its value) and named."""
    known = {"-fa", "--flash-attn", "-ngl", "-ub", "-ctv"}
    kept, dropped = logits.perplexity_args(["-fa", "on", "--reasoning-budget", "0", "-ub", "512", "-ngl", "9"],
                                           known)
    assert "--reasoning-budget" not in kept and kept[:2] == ["-fa", "on"] and kept[-2:] == ["-ngl", "9"]
    assert any(d.startswith("--reasoning-budget: this llama-perplexity does not take it") for d in dropped)
    assert "-ub 512: taken, but a 256-token chunk is one micro-batch of at most 256" in dropped


class Said(Progress):
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)


@pytest.mark.llama
def test_a_build_without_llama_perplexity_is_stored_and_said(demo_prep, tmp_path):
    """Every build's binaries in a folder without llama-perplexity: the baseline's run cannot be made, so no arm is
    compared; each arm's row says why, the progress says it once, and nothing raises."""
    empty = tmp_path / "bin"
    empty.mkdir()
    prep = dataclasses.replace(demo_prep, artifacts={k: dataclasses.replace(a, bin_dir=empty)
                                                     for k, a in demo_prep.artifacts.items()})
    setting = prep.study.settings[0].name
    builds = [b.name for b in prep.study.builds if b.name in prep.artifacts][:2]
    said = Said()
    with Store(tmp_path / "r.db") as s:
        run_id = s.new_run("demo", "", "h", version="test")
        for b in builds:
            s.finish_config(s.start_config(run_id, ConfigOutcome(build=b, setting=setting, status="running")), "ok")
        logits.check(prep, s, run_id, tmp_path / "logs", said)
        rows = {r["build"]: r["result"] for r in s.output_logits(run_id) if r["setting"] == setting}
    assert set(rows) == set(builds)
    assert all(r["error"].startswith("not compared: the baseline's run failed: not compared: there is no "
                                     f"llama-perplexity in {empty}") for r in rows.values()), rows
    assert len([w for w in said.warnings if setting in w]) == 1 and "no logits" in said.warnings[0], said.warnings


@pytest.mark.llama
def test_an_arm_that_cannot_be_compared_is_tried_twice_and_both_failures_kept(demo_prep, tmp_path):
    """The baseline's logits are saved (a real llama-perplexity run, two chunks of the synthetic model) and its A/A
    compares them: KLD 0.000000. The second build's binaries are in a folder without llama-perplexity: its
    comparison fails, is said, is run once more (its own log folder), and both failures are stored."""
    empty = tmp_path / "bin"
    empty.mkdir()
    base_name, other = [b.name for b in demo_prep.study.builds if b.name in demo_prep.artifacts][:2]
    arts = dict(demo_prep.artifacts)
    arts[other] = dataclasses.replace(arts[other], bin_dir=empty)
    prep = dataclasses.replace(demo_prep, artifacts=arts)
    setting = prep.study.settings[0].name
    said = Said()
    with Store(tmp_path / "r.db") as s:
        run_id = s.new_run("demo", "", "h", version="test")
        for b in (base_name, other):
            s.finish_config(s.start_config(run_id, ConfigOutcome(build=b, setting=setting, status="running")), "ok")
        logits.check(prep, s, run_id, tmp_path / "logs", said)
        rows = {r["build"]: r["result"] for r in s.output_logits(run_id) if r["setting"] == setting}
    assert rows[base_name].get("error") is None and abs(rows[base_name]["mean"]) < 1e-6, rows[base_name]
    why = f"not compared: there is no llama-perplexity in {empty}"
    assert (rows[other]["error"], rows[other]["first_try"]) == (why, why)
    # the first failure is a message (a second try follows), the second a warning
    assert any("running the comparison once more" in m for m in said.messages), said.messages
    assert len(said.warnings) == 1 and said.warnings[0].endswith(why), said.warnings
