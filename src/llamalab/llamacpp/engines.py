"""The engines llamalab builds and runs: llama.cpp, and its fork ik_llama.cpp. Pure.

An engine is a property of a build (`[[builds]] engine = "ik_llama.cpp"`; default llama.cpp): its source, how it is
built, its programs, which llama-server flags it has and how it logs. Everything above `llamacpp/` speaks of builds
and configurations; the facts that differ between the two engines are read from one `Engine` here.

What differs, each checked on ik_llama.cpp from PyPI's `ik-llama-cpp-python==0.1.5` (docs/llama-cpp-facts.md,
"ik_llama.cpp"):

- **Programs.** ik_llama.cpp's are examples: `llama-server`, `rpc-server` (llama.cpp b11312: `ggml-rpc-server`),
  `llama-perplexity`, `llama-bench`, `llama-gguf-split`; there is no `llama-fit-params`. Its CMake needs
  `LLAMA_BUILD_EXAMPLES=ON` for them.
- **One ggml library.** ik_llama.cpp builds one `libggml` (no ggml-base/ggml-cpu/ggml-rpc split), in
  `<tree>/ggml/src`; `GGML_SCHED_MAX_COPIES` (default **1** there, its PR #751; 4 in llama.cpp) is read only by
  `ggml-backend.cpp`, so a copies variant rebuilds the target `ggml` and is selected with `LD_LIBRARY_PATH`.
- **The kernel cut.** `GGML_IQK_FA_ALL_QUANTS=OFF` drops the CPU flash-attention kernels for Q4_0, Q4_1 and
  IQ4_NL K/V caches: 26% less compiler CPU time (20m35s against 27m54s of user time on this project's 2-core VM).
  It is safe only where no configuration uses such a cache (with flash attention, on by default in ik_llama.cpp,
  the first graph compute aborts: "K cache q4_0 coupled with V cache q4_0 is not a supported combination"), so
  `kernel_cut` applies it only then. The two cuts that would save more do not build in this source:
  `GGML_IQK_MUL_MAT=OFF` (a compile error in ggml-quants.c) and `GGML_IQK_FLASH_ATTENTION=OFF` (a link error:
  its stub has lost a parameter).
- **Pipeline parallelism** needs CUDA in ik_llama.cpp: `llama_init_from_model` sets it false `#ifndef
  GGML_USE_CUDA` ("requires support for async compute and events"), so a CPU + RPC build never runs it, whatever
  its copies. llama.cpp runs it on RPC, CUDA, Vulkan and ROCm devices.
- **Devices in a build without a GPU backend.** ik_llama.cpp counts a (missing) GPU as device 0, whose buffers fall
  back to the CPU, and its `-ts` is indexed that way: two rpc-servers are split with `-ts 0,A,B` (the CPU first,
  with no layers); with `-ts A,B` or none the CPU takes the first half of the layers and the second rpc-server none.
- **Flags.** ik_llama.cpp has no `-lv` (its library prints its memory lines at any verbosity; `--verbosity 1` only
  adds a line per generated token), no `-kvu` (its slots always split the context: `n_ctx_slot = n_ctx / -np`), no
  `-fitt`/`--fit-target` and no `--list-devices`; `--fit` takes no value and only moves MoE experts to the CPU;
  `--no-op-offload` does not exist. `OWN_ARGS` says what llamalab passes each engine instead.
- **Slot erase.** Its server posts a slot-erase task before it registers to wait for the answer
  (examples/server/server.cpp, `handle_slots_erase`), so where the main loop is quicker the answer is dropped and
  the request never returns (seen about once in a dozen erases on a busy 2-core machine). The erase itself has run
  by then; llamalab waits 5 s for each answer and counts a lost one as done, and gives the server 32 HTTP threads
  (`--threads-http`; its default is -np + 2) so that the threads such requests hold do not starve it.
- **Flash attention over RPC.** With flash attention on (its default) and two or more sequences in a batch, its
  rpc-server aborts: `iqk_fa_templates.h:1157: GGML_ASSERT(S > 0) failed` (a fully masked row; every run tried on
  this project's CPU with 2 or 4 parallel requests, on one rpc-server or two; not on the CPU alone, not with `-fa
  off`). A study says so as the configuration's failure; the `engines` preset measures parallel requests with
  `-fa off` too.
- **Side files.** ik_llama.cpp's programs write `./llama.log` into their working folder unless `--log-disable`
  (which leaves their stderr as it is).
- **Telling them apart.** llama.cpp since mid-2025 prints `version: 0.5.0 (build N, commit C)`; ik_llama.cpp prints
  `version: N (C)`, as older llama.cpp did. Where the version line cannot tell, `llama-server -rtr --version` does:
  ik_llama.cpp parses its own `-rtr` (run-time repack) and prints its version (exit 0), llama.cpp of any age refuses
  the unknown argument before it reaches `--version`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

LLAMA_CPP = "llama.cpp"
IK_LLAMA_CPP = "ik_llama.cpp"
NAMES = (LLAMA_CPP, IK_LLAMA_CPP)

COPIES = "GGML_SCHED_MAX_COPIES"


@dataclass(frozen=True)
class Engine:
    name: str
    defines: Mapping[str, str]  # CMake options every build of this engine gets
    programs: Mapping[str, str]  # llamalab's name of a program → this engine's target (and file under bin/)
    copies_target: str  # the library a GGML_SCHED_MAX_COPIES variant rebuilds
    copies_lib_dir: str  # where that library is in a tree
    copies_lib: str  # its file name, less `.so…`
    default_copies: int
    server_dir: str  # the server's folder in a source tree
    marker_dir: str  # a folder only this engine's source trees have
    log_args: tuple[str, ...]  # what llama-server gets so that its memory lines print and nothing lands in its cwd
    unified_kv: bool  # -kvu / --kv-unified exists
    fit_target: bool  # -fitt exists: llama.cpp's fit keeps a margin per device, which budgets are emulated with
    lists_devices: bool  # llama-server --list-devices exists
    pp_backends: frozenset[str]  # the backends on which it can run pipeline parallelism
    cpu_device_first: frozenset[str] = field(default_factory=frozenset)  # backends where -ts counts the CPU first
    server_extra: tuple[str, ...] = ()  # what else llama-server gets from llamalab (OWN_ARGS)
    erase_answer_lost: bool = False  # POST /slots/N?action=erase may never answer (module docstring)

    def target(self, program: str) -> str | None:
        """This engine's CMake target (and file name) of a program llamalab names, None where it has none."""
        return self.programs.get(program)

    def copies(self, options: Mapping[str, str]) -> int:
        """The scheduler copies a build with these CMake options has."""
        return int(options.get(COPIES, self.default_copies))


_COMMON_PROGRAMS = {"llama-server": "llama-server", "llama-bench": "llama-bench",
                    "llama-perplexity": "llama-perplexity", "llama-gguf-split": "llama-gguf-split"}

ENGINES: dict[str, Engine] = {
    LLAMA_CPP: Engine(
        name=LLAMA_CPP,
        # no tests, examples or web UI; no OpenSSL or curl (llama-cpp-facts.md §5)
        defines={"CMAKE_BUILD_TYPE": "Release", "LLAMA_BUILD_TESTS": "OFF", "LLAMA_BUILD_EXAMPLES": "OFF",
                 "LLAMA_BUILD_UI": "OFF", "LLAMA_USE_PREBUILT_UI": "OFF", "LLAMA_OPENSSL": "OFF", "LLAMA_CURL": "OFF"},
        programs={**_COMMON_PROGRAMS, "ggml-rpc-server": "ggml-rpc-server", "llama-fit-params": "llama-fit-params"},
        copies_target="ggml-base", copies_lib_dir="bin", copies_lib="libggml-base", default_copies=4,
        server_dir="tools/server", marker_dir="tools/server",
        log_args=("-lv", "4"),  # ggml/llama info lines print only at verbosity 4
        unified_kv=True, fit_target=True, lists_devices=True,
        pp_backends=frozenset({"cpu-rpc", "rpc", "cuda", "vulkan", "rocm"}),
    ),
    IK_LLAMA_CPP: Engine(
        name=IK_LLAMA_CPP,
        # the programs are examples; the same options as llama.cpp's where both have them (tests and curl off)
        defines={"CMAKE_BUILD_TYPE": "Release", "LLAMA_BUILD_TESTS": "OFF", "LLAMA_BUILD_EXAMPLES": "ON",
                 "LLAMA_BUILD_SERVER": "ON", "LLAMA_CURL": "OFF"},
        programs={**_COMMON_PROGRAMS, "ggml-rpc-server": "rpc-server"},
        copies_target="ggml", copies_lib_dir="ggml/src", copies_lib="libggml", default_copies=1,
        server_dir="examples/server", marker_dir="ggml/src/iqk",
        log_args=("--log-disable",),  # its memory lines print at any verbosity; no ./llama.log
        unified_kv=False, fit_target=False, lists_devices=False,
        pp_backends=frozenset({"cuda"}),
        cpu_device_first=frozenset({"cpu-rpc", "rpc", "cpu"}),
        server_extra=("--threads-http", "32"),
        erase_answer_lost=True,
    ),
}


def get(name: str | None) -> Engine:
    """The engine of that name (None: llama.cpp); a KeyError names the engines there are."""
    try:
        return ENGINES[name or LLAMA_CPP]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}: use one of {', '.join(NAMES)}") from None


# ---------------------------------------------------------------- what llamalab passes each engine

# Each argument llamalab adds to a llama-server command line of its own accord, and what it does per engine: the
# decisions docs/engines.md lists. (`-c` and `-np` are the same in both.)
OWN_ARGS: dict[str, dict[str, str]] = {
    "-lv 4": {LLAMA_CPP: "passed: ggml/llama info lines (the ledger's input) print only at verbosity 4",
              IK_LLAMA_CPP: "left out: ik_llama.cpp has no -lv, and prints its memory lines at any verbosity "
                            "(its --verbosity 1 adds only a line per generated token)"},
    "--log-disable": {LLAMA_CPP: "not passed (llama.cpp writes no log file of its own)",
                      IK_LLAMA_CPP: "passed: otherwise every ik_llama.cpp program writes ./llama.log into its working "
                                    "folder; its stderr is the same either way"},
    "--metrics": {LLAMA_CPP: "passed", IK_LLAMA_CPP: "passed (the same /metrics)"},
    "-kvu": {LLAMA_CPP: "passed: the -np slots share one KV cache of n_ctx cells",
             IK_LLAMA_CPP: "left out: ik_llama.cpp has no unified KV cache; each of the -np slots gets n_ctx / -np "
                           "cells (its log's `n_ctx_slot`), which the workload's levels are fitted to"},
    "-cram 0": {LLAMA_CPP: "passed: no host-RAM prompt cache", IK_LLAMA_CPP: "passed (same flag, default 8192 MiB)"},
    "-fitt": {LLAMA_CPP: "passed with budgets: the fit's margin per device emulates a budget",
              IK_LLAMA_CPP: "left out: ik_llama.cpp has no fit of the context (its --fit only moves MoE experts); "
                            "under budgets llamalab searches the largest context within them by loads and passes -c"},
    "--threads-http 32": {LLAMA_CPP: "not passed",
                          IK_LLAMA_CPP: "passed: a slot erase whose answer ik_llama.cpp lost holds an HTTP thread "
                                        "for good (module docstring); its default is -np + 2"},
    "--slot-save-path": {LLAMA_CPP: "passed: POST /slots/N?action=erase needs it",
                         IK_LLAMA_CPP: "passed: the same (ik_llama.cpp registers the erase action only with it)"},
    "-ts": {LLAMA_CPP: "as the study or the budgets give it",
            IK_LLAMA_CPP: "on CPU + RPC devices with a 0 first (-ts 0,A,B; -ts 0,1,1 where none is given): "
                          "ik_llama.cpp counts the missing GPU as device 0, falling back to the CPU"},
}


def log_args(engine: Engine) -> list[str]:
    return list(engine.log_args)


def device_split(engine: Engine, backend: str, split: Iterable[float] | None, n_devices: int) -> list[str] | None:
    """The `-ts` values llama-server needs for a layer split over the study's devices (`split`: the study's or the
    budgets', None for an even split), as strings; None where the engine needs none of its own. ik_llama.cpp on a
    build without a GPU backend counts the CPU as device 0 (module docstring): it gets a 0 in front."""
    if backend not in engine.cpu_device_first or n_devices < 1:
        return None
    parts = [_num(x) for x in split] if split is not None else ["1"] * n_devices
    return ["0", *parts]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


# ---------------------------------------------------------------- the kernel cut

IK_FA_CUT = {"GGML_IQK_FA_ALL_QUANTS": "OFF"}
# the K/V cache types whose CPU flash-attention kernels GGML_IQK_FA_ALL_QUANTS=OFF drops (iqk_fa_templates.h)
IK_FA_CUT_TYPES = frozenset({"q4_0", "q4_1", "iq4_nl"})


def kernel_cut(engine: Engine, kv_types: Iterable[str], options: Mapping[str, object]) -> dict[str, str]:
    """The CMake options that cut the engine's kernels no configuration uses: for ik_llama.cpp
    `GGML_IQK_FA_ALL_QUANTS=OFF` unless a K/V cache type needs those kernels or the build sets the option itself;
    nothing for llama.cpp."""
    if engine.name != IK_LLAMA_CPP or any(k in options for k in IK_FA_CUT):
        return {}
    if {t.lower() for t in kv_types} & IK_FA_CUT_TYPES:
        return {}
    return dict(IK_FA_CUT)


# ---------------------------------------------------------------- telling engines apart

# `version: 0.5.0 (build 11312, commit 0c1e570)`: llama.cpp since mid-2025 (ik_llama.cpp prints `version: N (C)`)
_NEW_VERSION = re.compile(r"^version: \S+ \(build \d+, commit [^)\s]+\)", re.M)
IK_PROBE = ("-rtr", "--version")  # an ik_llama.cpp-only flag in front of --version (module docstring)


def engine_of_version(version_text: str) -> str | None:
    """llama.cpp where `--version` prints its current form; None where the text cannot tell (ik_llama.cpp and
    llama.cpp before mid-2025 print the same `version: N (C)`): `IK_PROBE` decides then."""
    return LLAMA_CPP if _NEW_VERSION.search(version_text) else None


def engine_of_probe(returncode: int, output: str) -> str:
    """The engine `llama-server -rtr --version` shows: ik_llama.cpp where it printed its version and exited 0."""
    return IK_LLAMA_CPP if returncode == 0 and output.lstrip().startswith("version:") else LLAMA_CPP
