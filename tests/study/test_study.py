"""Study files: presets load, overrides apply, and every mistake names the exact nested key."""

import pytest

from llamalab.core.errors import ConfigError
from llamalab.study import spec as study


def test_presets_load_and_expand():
    for name in study.preset_names():
        st, text = study.load(name)
        assert st.builds and text
    st, _ = study.load("demo")
    assert [b.name for b in st.builds] == ["copies4", "copies1", "no-pp-blas", "no-pp-override"]
    assert [s.name for s in st.settings] == ["kv-f16-q8_0", "kv-f16-f16"]
    passes = study.expand(st)
    assert len(passes) == 8 and all(p.trials == (1, 2, 3) for p in passes)


def test_interleaved_order_makes_one_round_per_repeat():
    st, _ = study.load("demo", ["workload.order=\"interleaved\"", "workload.repeats=2"])
    passes = study.expand(st)
    assert [(p.config.build.name, p.trials) for p in passes[:3]] == [
        ("copies4", (1,)), ("copies4", (1,)), ("copies1", (1,))]
    assert len(passes) == 16 and passes[-1].trials == (2,)
    # each round one configuration later: round 2 starts with round 1's second
    assert passes[8].config == passes[1].config and passes[15].config == passes[0].config
    assert sorted(p.config.id for p in passes[8:]) == sorted(p.config.id for p in passes[:8])


def test_interleaved_rounds_put_every_configuration_in_every_place():
    """An A/A pair over 4 rounds: each copy first twice and second twice (a place effect falls on both)."""
    st, _ = study.load("demo", ['builds=[{name="a"},{name="b"}]', 'settings=[{name="s"}]',
                                "workload.order=\"interleaved\"", "workload.repeats=4"])
    order = [(p.config.build.name, p.trials[0]) for p in study.expand(st)]
    assert order == [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3), ("b", 4), ("a", 4)]


@pytest.mark.parametrize("override, check", [
    pytest.param("workload.repeats=5", lambda s: s.workload.repeats == 5, id="int"),
    pytest.param("workload.concurrency=[1,4]", lambda s: s.workload.concurrency == [1, 4], id="list"),
    pytest.param('devices.vram=["16GiB","12GiB"]', lambda s: s.devices.vram == ["16GiB", "12GiB"], id="strings"),
    pytest.param("model.preset=8b", lambda s: s.model.preset == "8b", id="bare-string"),
])
def test_overrides(override, check):
    st, _ = study.load("demo", [override])
    assert check(st)


@pytest.mark.parametrize("data, expected", [
    pytest.param({"name": "x", "builds": [{"name": "a"}], "workload": {"repeat": 3}},
                 "unknown key workload.repeat", id="unknown-nested-key"),
    pytest.param({"name": "x", "builds": [{"name": "a", "cmak": {}}]},
                 "unknown key builds[0] (a).cmak", id="unknown-key-in-list-names-the-build"),
    pytest.param({"name": "x", "builds": [{"name": "a"}], "workload": {"repeats": "three"}},
                 "workload.repeats", id="wrong-type"),
    pytest.param({"name": "x", "builds": [{"name": "a"}], "devices": {"backend": "tpu"}},
                 "devices.backend", id="bad-choice"),
    pytest.param({"builds": [{"name": "a"}]}, "missing key name", id="missing"),
    pytest.param({"name": "x", "builds": [{"name": "a"}, {"name": "a"}]}, "duplicate name", id="duplicate"),
    pytest.param({"name": "x", "builds": []}, "at least one build", id="no-builds"),
])
def test_errors_name_the_key(data, expected):
    with pytest.raises(ConfigError) as e:
        study.parse(data, "test.toml")
    assert expected in str(e.value)
    assert "docs/study-files.md" in str(e.value)


def test_unknown_preset_lists_presets():
    with pytest.raises(ConfigError, match="unknown study preset 'pipline-parallel'") as e:
        study.load("pipline-parallel")
    assert "pipeline-parallel" in e.value.tip


def test_bad_toml_and_bad_override(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("name = 'x'\n[[builds]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        study.load(str(f))
    with pytest.raises(ConfigError, match="has no '='"):
        study.load("demo", ["workload.repeats"])
    with pytest.raises(ConfigError, match="does not exist"):
        study.load(str(tmp_path / "missing.toml"))


@pytest.mark.parametrize("ref, overrides", [
    pytest.param("demo", [], id="demo"),
    pytest.param("pipeline-parallel", [], id="pipeline-parallel"),
    pytest.param("demo", ['builds=[{name="a",label="quote \\" and unicode ×",cmake={GGML_BLAS=true,X=1}}]',
                          'devices.vram=["16GiB","12GiB"]', "workload.threshold=0.05"], id="overrides"),
])
def test_effective_study_round_trips_through_toml(ref, overrides):
    st, _ = study.load(ref, overrides)
    again = study.parse(__import__("tomllib").loads(study.to_toml(st)))
    assert again == st


def test_split_modes_preset_has_every_mode_as_an_arm():
    st, _ = study.load("split-modes")
    arms = {b.name: (b.args, b.cmake, b.min_devices) for b in st.builds}
    assert arms == {
        "copies4": ([], {}, None),
        "copies1": ([], {"GGML_SCHED_MAX_COPIES": 1}, None),
        "no-pp-override": (["-ot", "no_such_tensor=CPU"], {}, None),
        "sm-tensor": (["-sm", "tensor"], {}, 2),
        "sm-row": (["-sm", "row"], {}, 2),
        "sm-none": (["-sm", "none"], {}, 2),
    }
    assert [s.args for s in st.settings] == [["-ctk", "f16", "-ctv", "f16"]]  # tensor split with unquantized KV
    passes = study.expand(st)
    assert [p.config.id for p in passes] == [f"{b}|kv-f16" for b in arms]
    assert [p.config.min_devices for p in passes] == [1, 1, 1, 2, 2, 2]
    again = study.parse(__import__("tomllib").loads(study.to_toml(st)))
    assert again == st


def test_pipeline_parallel_preset_gains_tensor_split_where_there_are_two_devices():
    st, _ = study.load("pipeline-parallel")
    tensor = next(b for b in st.builds if b.name == "sm-tensor")
    assert (tensor.args, tensor.cmake, tensor.min_devices) == (["-sm", "tensor"], {}, 2)
    assert [b.name for b in st.builds][:4] == ["copies4", "copies1", "no-pp-blas", "no-pp-override"]


@pytest.mark.parametrize("value, ok", [(1, True), (2, True), (0, False), (-1, False), ("two", False)])
def test_min_devices_is_a_count(value, ok):
    data = {"name": "x", "builds": [{"name": "a", "min_devices": value}],
            "settings": [{"name": "s", "min_devices": value}]}
    if ok:
        st = study.parse(data)
        assert study.configs(st)[0].min_devices == value
    else:
        with pytest.raises(ConfigError, match=r"builds\[0\] \(a\)\.min_devices"):
            study.parse(data)


@pytest.mark.parametrize("devices, backend, n", [
    ({}, "cpu-rpc", 2),
    ({"count": 3}, "cuda", 3),
    ({"count": 4}, "cpu", 1),  # the host alone, whatever the count
    ({"count": 1, "rpc": ["10.0.0.2:50052"]}, "cpu-rpc", 2),
    ({"backend": "rpc", "rpc": ["10.0.0.2:50052", "10.0.0.3:50052"]}, "rpc", 2),
])
def test_rig_devices(devices, backend, n):
    st = study.parse({"name": "x", "builds": [{"name": "a"}], "devices": devices})
    assert study.rig_devices(st, backend) == n
