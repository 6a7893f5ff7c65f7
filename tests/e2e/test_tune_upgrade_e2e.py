"""What a tune keeps for reuse is reused only by the code and on the rig that made it (issue 44), for real on the
CPU demo rig (`tune-demo`: two local rpc-servers, the synthetic tiny model, the pinned llama.cpp):

- a stage one cached by another llamalab is not reused: the tune makes it again (its dry runs run), and the
  progress and the stored search — which the report reads — say it was computed afresh and why;
- a KV quality result cached with another build or on another backend is not reused; the quality runs run on the
  study's devices (llama-perplexity offloaded to the two rpc-servers).

A synthetic model's KL divergence means nothing (random weights), which is why tune itself does not measure it;
llama-perplexity runs on it all the same, and only that it runs, where and what is cached, is checked here.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from llamalab.quality import kv as quality
from llamalab.report.analysis import tune as rtune
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod
from llamalab.tune import stage_one as s1
from llamalab.tune import stage_one_cache as cache
from llamalab.tune import tune as tunemod

pytestmark = [pytest.mark.llama]

NARROW = ['tune.kv=["f16/f16","q8_0/q8_0"]', "tune.ubatch=[512]", 'tune.splits=["layer","none"]']


class Said(Progress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


@pytest.fixture(scope="module")
def setup(llama_home):
    study, _ = studymod.load("tune-demo", NARROW)
    return tunemod.prepare(study, RunOptions(home=llama_home), Progress())


def test_a_stage_one_cached_by_another_llamalab_is_computed_afresh(setup, tmp_path):
    home, said = tmp_path / "home", Said()

    def again():
        return cache.made_or_cached(setup, tmp_path / "logs", home, fresh=False, timeout_s=120, progress=said)

    first = again()
    assert first.key and first.dry_runs > 0 and first.reused_from is None and first.afresh is None
    assert isinstance(again(), s1.StageOne) and again().reused_from == first.key  # this llamalab's: reused
    # the same search cached by another llamalab: its own file, recording its own version
    mine = cache.path(home, first.key)
    doc = json.loads(mine.read_text())
    doc["made_by"] = {"llamalab": "0.0.9", "code": "0123456789ab"}
    mine.rename(mine.with_name(f"stage1-{first.key}-0badc0de.json")).write_text(json.dumps(doc))
    said.lines.clear()
    t0 = time.monotonic()
    made = again()
    assert made.reused_from is None and made.dry_runs == first.dry_runs, "its dry runs ran again"
    assert made.afresh and made.afresh.startswith("it was made by llamalab 0.0.9 (stage-one code 0123456789ab), "
                                                  "this is llamalab ")
    assert any(line.startswith("tune stage one: computed afresh, not reused from the cache of this search: it was "
                               "made by llamalab 0.0.9") for line in said.lines), said.lines
    assert [(m.candidate.key(), m.n_ctx) for m in made.front] == [(m.candidate.key(), m.n_ctx) for m in first.front]
    # what the run stores, and the report shows
    doc = tunemod.search_doc(setup, made, s1.counts(made))
    assert doc["stage1"]["afresh"] == made.afresh
    assert f"stage one computed afresh, not reused from the cache of this search: {made.afresh}" in \
        rtune.stage_lines(doc)
    print(f"\nstage one computed afresh in {time.monotonic() - t0:.1f} s ({made.dry_runs} dry runs): "
          f"{made.afresh}")
    assert again().reused_from == first.key  # and this llamalab's file is the one read from now on


def test_a_quality_result_of_another_build_or_backend_is_not_reused(setup, tmp_path):
    prep = setup.prep
    runs = quality.Runs.of(prep, setup.art)
    home = tmp_path / "home"

    def measure(r: quality.Runs, logs: str) -> quality.Quality:
        return quality.for_pairs(r, prep.model_path, prep.model_info.fingerprint, prep.source.path, ["q8_0/q8_0"],
                                 home, tmp_path / logs, Progress())

    first = measure(runs, "logs1")
    assert first.measured and not first.by_pair["q8_0/q8_0"]["cached"], first.notes
    assert first.runs == {"build": f"{setup.art.source.key}/{setup.art.key}", "backend": "cpu-rpcx2"}
    # on the study's devices: llama-perplexity got the rpc-servers and offloaded its layers to them
    log = (tmp_path / "logs1" / "kld-q8_0-q8_0.log").read_text(errors="replace")
    assert "using device RPC0" in log and "using device RPC1" in log, log[-3000:]
    assert "offloaded 9/9 layers to GPU" in log
    assert measure(runs, "logs2").by_pair["q8_0/q8_0"]["cached"] and not (tmp_path / "logs2").exists()
    for other in (dataclasses.replace(runs, build="another-build"), dataclasses.replace(runs, backend="cudax2")):
        got = measure(other, f"logs-{other.cache_key()}")
        assert not got.by_pair["q8_0/q8_0"]["cached"], other  # measured again, not read from the cache
        assert (tmp_path / f"logs-{other.cache_key()}" / "kld-q8_0-q8_0.log").is_file()
