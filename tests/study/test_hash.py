"""The run hash of every committed study, pinned: `setup.prepare.study_hash` is how an unfinished run is found again,
so a change to the study model (a new field, a new default) must leave these as they are or resumes of runs begun
before it break. The figures are what the code gave before the hash was derived from the model's fields
(`study.spec.HASHED_FIELDS`); a new field at its default must not move them."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamalab.setup import prepare as session
from llamalab.study import spec
from testpaths import ROOT

MODEL = Path("/m/model.gguf")

PINNED = {
    "demo": "e58e9d415bd9b82e",
    "engines": "d6169906da205514",
    "pipeline-parallel": "d534eff20c7ce4f4",
    "split-modes": "a9020f032bd7b5df",
    "tune": "a342b241045661a1",
    "tune-demo": "befefaee11d1c2d1",
    "versions": "0a304fca884a5000",
    "benchmarks/h200/study.toml": "3a5532f1b90badaa",
    "benchmarks/split-modes-h200/study.toml": "8b62ff211533ff08",
    "benchmarks/vulkan-h200/study-27b.toml": "5f6c3b770a1fb2b3",
    "benchmarks/vulkan-h200/study.toml": "f2ddd3f94b53217e",
}

# studies with the keys that hash only where set, as the code before gave them
VARIANTS = [
    ("demo", ['source.bin="/opt/x"'], "2ab4cbbd22b994a3"),
    ("tune", ["tune.exhaustive=true", "tune.seconds=60"], "fa4232a8973e5fb6"),
    ("demo", ["workload.seed=7"], "f026252a51f239f5"),
    ("demo", ['tune.goal="throughput"'], "ecb37c2ea33d15d2"),
]


def test_every_committed_study_is_pinned():
    presets = set(spec.preset_names())
    files = {str(p.relative_to(ROOT)) for p in ROOT.glob("benchmarks/*/study*.toml")}
    assert presets | files == set(PINNED)


@pytest.mark.parametrize("ref", sorted(PINNED))
def test_committed_study_hash(ref):
    st, _ = spec.load(ref if spec.is_preset(ref) else str(ROOT / ref))
    assert session.study_hash(st, MODEL) == PINNED[ref]


@pytest.mark.parametrize(("ref", "sets", "want"), VARIANTS)
def test_set_keys_hash_as_before(ref, sets, want):
    st, _ = spec.load(ref, sets)
    assert session.study_hash(st, MODEL) == want


def test_a_field_at_its_default_leaves_the_hash_alone():
    """A field outside HASHED_FIELDS (as one added later is) is left out while it holds its default, and hashed
    once it is set."""
    st, _ = spec.load("demo")
    assert "min_devices" not in spec.HASHED_FIELDS["BuildSpec"]
    assert "min_devices" not in spec.hash_dump(st)["builds"][0]
    b0 = st.builds[0].model_copy(update={"min_devices": 2})
    two = st.model_copy(update={"builds": [b0, *st.builds[1:]]})
    assert spec.hash_dump(two)["builds"][0]["min_devices"] == 2
    assert session.study_hash(two, MODEL) != session.study_hash(st, MODEL)


def test_budgets_are_parsed_once_and_override():
    st, _ = spec.load("demo", ['devices.vram=["1GiB", "512MiB"]'])
    assert st.devices.budgets_mib == [1024, 512]
    over = spec.with_budgets(st, [300, 200])
    assert over.devices.budgets_mib == [300, 200] and over.devices.vram == ["300MiB", "200MiB"]
    assert spec.with_budgets(st, None) is st
    assert spec.parse({"name": "x", "builds": [{"name": "b"}]}).devices.budgets_mib is None
