"""llamacpp.argv: reading and editing llama-server argument lists."""

from llamalab.llamacpp import argv


def test_value_reads_the_last_occurrence_in_either_form():
    args = ["-np", "2", "-c", "4096", "--parallel=8"]
    assert argv.value(args, *argv.PARALLEL) == "8"
    assert argv.value(args, *argv.CTX_SIZE) == "4096"
    assert argv.value(args, "-ts") is None
    assert argv.value(["-np"], "-np") == ""
    assert argv.occurrences(args, *argv.PARALLEL) == [("-np", "2"), ("--parallel", "8")]


def test_has_sees_bare_and_equals_forms():
    assert argv.has(["--cache-ram=0"], *argv.CACHE_RAM)
    assert argv.has(["-nkvo"], "-nkvo", "--no-kv-offload")
    assert not argv.has(["-c", "-np"], "-np2")


def test_without_drops_both_forms_and_keeps_the_rest():
    args = ["-c", "1", "--ctx-size=2", "-ngl", "99", "-kvu", "--metrics"]
    assert argv.without(args, with_value={"-c", "--ctx-size"}, bare={"--metrics"}) == ["-ngl", "99", "-kvu"]


def test_replaced_drops_aliases_and_appends():
    args = ["--fit-target=512", "-ngl", "99", "-ts", "1,1"]
    assert argv.replaced(args, ["-fitt", "1024,2048", "-ts", "3,1"]) == ["-ngl", "99", "-fitt", "1024,2048",
                                                                          "-ts", "3,1"]


def test_put_sets_in_place_or_appends():
    assert argv.put(["a", "-lv", "4", "b", "-lv=3"], "-lv", "5") == ["a", "-lv", "5", "b"]
    assert argv.put(["-dev=Vulkan0"], "-dev", "RPC0,Vulkan0") == ["-dev", "RPC0,Vulkan0"]
    assert argv.put(["a"], "-lv", "5") == ["a", "-lv", "5"]


def test_split_mode_and_slots_take_the_last_valid_value():
    assert argv.split_mode(["-sm", "row", "--split-mode=bogus"]) == "row"
    assert argv.split_mode([]) == "layer"
    assert argv.n_slots(["-np", "2", "--parallel", "x"]) == 2
    assert argv.n_slots([]) == 4
    assert argv.tensor_split(["--tensor-split=3/1"]) == [3.0, 1.0]
