"""Property: `ledger.parse` (and what `llamalab inspect` builds on it) never raises, whatever it is fed, and no line
makes any parser of llama.cpp output slow.

Arbitrary text, mutated real logs, lines built from llama.cpp's own vocabulary so the parser's deeper branches are
reached, and long lines: runs of one character (or a short group) thousands long next to that vocabulary, and its
words repeated. Profile "ledger-fuzz" (derandomized, no example database, no deadline) keeps CI reproducible.

Each property runs twice over: `deep` (marked `slow`: `make test` runs it, `make test-fast` does not) with EXAMPLES,
more than 10,000 inputs in all, about a minute of CPU; `quick` (in the fast suite) with a tenth of them, the same
strategies and checks. Each test counts its own examples and checks that it ran them all, so the count holds
whatever tests run, in whatever order.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamalab.fit import budget
from llamalab.logs import devicelist, dryrun, failures, ledger, memory, records
from llamalab.logs import inspect as inspect_view
from llamalab.plan import plan
from llamalab.rig import remote
from testpaths import FIXTURES

pytestmark = pytest.mark.spread

settings.register_profile("ledger-fuzz", deadline=None, derandomize=True, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.large_base_example])
PROFILE = settings.get_profile("ledger-fuzz")
LOGS = FIXTURES / "logs"
FIXTURE_LINES = {p.stem: p.read_text(encoding="utf-8", errors="replace").splitlines()
                 for p in sorted(LOGS.glob("*.log"))}
# examples per test; together more than 10,000
EXAMPLES = {"arbitrary": 3000, "mutated": 4000, "vocabulary": 3200, "inspect": 400, "long": 500, "repeated": 500}


QUICK = 10  # the fast suite runs EXAMPLES[name] // QUICK
DEPTH = pytest.mark.parametrize("depth", [pytest.param("quick"), pytest.param("deep", marks=pytest.mark.slow)])


def run_property(name: str, strategy, body, depth: str) -> None:
    """Run `body` on EXAMPLES[name] generated inputs (a tenth of them when `depth` is "quick") and check that all of
    them ran."""
    n = EXAMPLES[name] if depth == "deep" else EXAMPLES[name] // QUICK
    seen = [0]

    @settings(PROFILE, max_examples=n)
    @given(strategy)
    def prop(value):
        seen[0] += 1
        body(value)

    prop()
    assert seen[0] >= n, (name, seen[0])


def check(lines) -> records.Ledger:
    led = ledger.parse(lines)
    assert isinstance(led, records.Ledger)
    json.dumps(led.to_json())
    memory.one_copy_saving(led)
    memory.kv_bytes_per_token(led)
    return led


# ---------------------------------------------------------------- arbitrary input

anything = st.one_of(st.text(max_size=200), st.binary(max_size=120), st.integers(), st.none(),
                     st.text(alphabet="0123456789.=:|[]()- \r\n\x1b{}\"", max_size=120))


@DEPTH
def test_arbitrary_lines_never_raise(depth):
    run_property("arbitrary", st.lists(anything, max_size=25), check, depth)


# ---------------------------------------------------------------- mutated real logs

def mutate(line: str, how: int, data) -> str:
    if how == 0:  # cut the line anywhere
        return line[: data.draw(st.integers(0, len(line)))]
    if how == 1:  # replace a run of digits with something odd
        odd = data.draw(st.sampled_from(["", "-1", "0", "99999999999999999999999", "1e309", "nan", "1.2.3", "٣"]))
        return "".join(odd if ch.isdigit() else ch for ch in line[:40]) + line[40:]
    if how == 2:  # insert random text
        at = data.draw(st.integers(0, len(line)))
        return line[:at] + data.draw(st.text(max_size=20)) + line[at:]
    if how == 3:  # colour codes and carriage returns
        return "\x1b[3" + str(how) + "m" + line + "\x1b[0m\r\n"
    return line * 2


def mutated_log(data) -> None:
    name = data.draw(st.sampled_from(sorted(FIXTURE_LINES)))
    lines = FIXTURE_LINES[name]
    start = data.draw(st.integers(0, max(0, len(lines) - 1)))
    chunk = lines[start:start + data.draw(st.integers(1, 60))]
    out = []
    for line in chunk:
        how = data.draw(st.integers(0, 7))
        out.append(mutate(line, how, data) if how < 5 else line)
    if data.draw(st.booleans()):
        out = out[::-1]  # lines out of order
    check(out)


@DEPTH
def test_mutated_real_logs_never_raise(depth):
    run_property("mutated", st.data(), mutated_log, depth)


# ---------------------------------------------------------------- llama.cpp vocabulary

PREFIXES = ["", "load_tensors: ", "llm_load_tensors: ", "llama_context: ", "llama_new_context_with_model: ",
            "llama_init_from_model: ", "init: ", "llama_kv_cache: ", "llama_kv_cache_unified: ", "sched_reserve: ",
            "common_memory_breakdown_print: ", "0.00.248.333 I ", "[123] 0.09.021.630 D ", "llama-1  | ",
            "alloc_compute_meta: ", "srv    load_model: "]
NAMES = ["CUDA0", "CUDA_Host", "CPU", "CPU_Mapped", "RPC0[127.0.0.1:50101]", "Vulkan0", "MTL0", "Meta()", "AMX", "",
         "x", "ROCm_Host", "[", "RPC0[[::1]:1]", "(", "CUDA0)"]
KINDS = ["model ", "KV ", "RS ", "compute ", "output ", "input ", "LoRA ", "DSV4 c state ", ""]
num = st.one_of(st.integers(-5, 10**7).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                st.sampled_from(["", "0", "00.00", "1e400", "9" * 30]))


@st.composite
def vocab_line(draw):
    p = draw(st.sampled_from(PREFIXES))
    n = draw(num)
    body = draw(st.sampled_from([
        "{name} {kind}buffer size = {n} MiB",
        "KV self size  = {n} MiB, K (f16): {n} MiB, V (q8_0): {n} MiB",
        "size = {n} MiB ({n} cells, {n} layers, {n}/{n} seqs), K (f16): {n} MiB, V (f16): {n} MiB",
        "size = {n} MiB ({n} cells, {n} layers, {n} seqs {n} rs_seq), R (f32): {n} MiB, S (f32): {n} MiB",
        "kv_size = {n}, offload = 1, type_k = 'f16', type_v = 'q4_0', n_layer = {n}, can_shift = 1",
        "pipeline parallelism enabled", "pipeline parallelism enabled (n_copies={n})",
        "compute buffer allocation failed, retrying without pipeline parallelism",
        "reserve took {n} ms, sched copies = {n}",
        "graph: nodes = {n}, splits = {n}, input objects = 4",
        "graph (pp bs={n}, tg bs={n}): nodes = {n} / {n}, splits = {n} / {n}",
        "graph nodes  = {n}", "graph splits = {n} (with bs={n}), {n} (with bs=1)", "graph splits (measure): {n}",
        "n_ctx = {n}", "n_ctx_seq = {n}", "n_ctx_per_seq = {n}", "n_ubatch = {n}", "flash_attn = {n}",
        "offloaded {n}/{n} layers to GPU", "context size reduced from {n} to {n} -> need {n} MiB less",
        "| memory breakdown [MiB] | total free self model context compute unaccounted |",
        "|   - {name} ({n}) | {n} = {n} + ( {n} = {n} + {n} + {n}) + {n} |", "|   - Host | {n} = {n} + {n} + {n} |",
        "loading draft model '{name}'", "creating SWA KV cache, size = {n} cells", "creating non-SWA KV cache",
        "failed to allocate {name} buffer of size {n}",
        "failed to initialize the context: failed to allocate compute pp buffers",
        "printing fitted CLI arguments to stdout...", "-c {n} -ngl {n}",
        '{{"type":"log","msg":"{name} {kind}buffer size = {n} MiB\\n"}}',
        "print_info: n_embd = {n}", "build: {n} ({name}) with cc",
    ]))
    try:
        text = body.format(name=draw(st.sampled_from(NAMES)), kind=draw(st.sampled_from(KINDS)), n=n)
    except (IndexError, KeyError, ValueError):
        text = body
    return p + text


def vocabulary_log(lines) -> None:
    led = check(lines)
    for b in (*led.devices.values(), *led.host.values()):
        for v in (b.model_mib, b.kv_mib, b.rs_mib, b.compute_mib, b.output_mib):
            assert v is None or v >= 0


@DEPTH
def test_llama_vocabulary_never_raises(depth):
    run_property("vocabulary", st.lists(vocab_line(), max_size=40), vocabulary_log, depth)


def inspect_log(lines) -> None:
    led = ledger.parse(lines)
    assert isinstance(inspect_view.render(led), str)
    json.dumps(inspect_view.inspect_json(led))


@DEPTH
def test_inspect_output_never_raises(depth):
    run_property("inspect", st.lists(vocab_line(), max_size=30), inspect_log, depth)


# ---------------------------------------------------------------- long lines and repeated characters

RUN_UNITS = [" ", ":", "|", "-", "0", "(", ")", "[", "]", "=", ".", "\t", ",", "_", "'", "a", "{", "\x1b", "/"]
run_unit = st.one_of(st.sampled_from(RUN_UNITS), st.text(alphabet="0123456789.=:|[]()-_ a{}'", min_size=2, max_size=4))


@st.composite
def long_line(draw):
    """A run thousands of characters long before, after, around or inside a line of llama.cpp's vocabulary."""
    unit = draw(run_unit)
    run = unit * (draw(st.integers(1000, 30_000)) // len(unit))
    words = draw(vocab_line())
    at = draw(st.integers(0, len(words)))
    return draw(st.sampled_from([run + words, words + run, words[:at] + run + words[at:], run + words + run,
                                 words[:at] + run]))


@st.composite
def repeated_line(draw):
    """A piece of llama.cpp's vocabulary (or one character) repeated into a line thousands of characters long."""
    words = draw(vocab_line())
    a = draw(st.integers(0, len(words)))
    piece = draw(st.one_of(st.just(words), st.just(words[a:a + draw(st.integers(1, 12))]), run_unit)) or "x"
    return piece * (draw(st.integers(1000, 30_000)) // len(piece) + 1)


def every_parser_quickly(lines) -> None:
    """Every parser of llama.cpp output reads the lines, each in well under a second (CPU time)."""
    t = time.process_time()
    led = check(lines)
    inspect_view.inspect_json(led)
    failures.failure_reason(lines)
    dryrun.parse_dry_run(lines)
    devicelist.parse_devices(lines)
    remote.parse_device_lines(lines)
    remote.server_devices(["Devices:", *lines])
    took = time.process_time() - t
    assert took < 1.0 * max(1, len(lines)), (took, [line[:80] for line in lines])


@DEPTH
def test_long_lines_parse_quickly(depth):
    run_property("long", st.lists(long_line(), min_size=1, max_size=3), every_parser_quickly, depth)


@DEPTH
def test_repeated_characters_parse_quickly(depth):
    run_property("repeated", st.lists(repeated_line(), min_size=1, max_size=3), every_parser_quickly, depth)


def test_the_fuzz_runs_ten_thousand_inputs():
    assert sum(EXAMPLES.values()) >= 10_000
