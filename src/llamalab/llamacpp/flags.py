"""llama-server's flags llamalab knows something about, in one table [pure].

Each `Flag` has its canonical name (the short one where llama-server has one), every other spelling llama.cpp
accepts (common/arg.cpp, b11312/b11434), the kind of value it takes, llama-bench's equivalent (or that the
crosscheck may leave it out), and why a study file that passes it needs the user's word (study/trust.py). A flag
is looked up as llama.cpp reads it (`name_of`: `--n_gpu_layers=5` is `--n-gpu-layers`, an alias of `-ngl`).
`argv`, `crosscheck`, the trust gate, the study model and the tune search read their flag facts from here; so are
the K/V cache types `-ctk`/`-ctv` take (with ggml's bytes per value).

Each flag also says which engine has it (`Flag.engines`; engines.py): most are in both llama.cpp and ik_llama.cpp
(its common/common.cpp, ik-llama-cpp-python 0.1.5); `-lv`, `-kvu`, `-fitt`, `-fitc`, `--no-op-offload` are
llama.cpp's alone (ik_llama.cpp spells verbosity `--verbosity` only, and its `--fit` takes no value), and
ik_llama.cpp has its own (`-rtr`, `-gr`/`-no-gr`, `-mla`, `--fit-margin` …). `lacks` says why a flag is not one
an engine takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .engines import IK_LLAMA_CPP, LLAMA_CPP, NAMES

# the kind of value a flag takes
BARE = "bare"  # no value
COUNT = "count"  # a whole number (ASCII digits)
INT = "int"  # an integer, maybe negative (-1: all)
NUMBER = "number"
LIST = "list"  # comma-separated values (-ts 3,1)
CHOICE = "choice"  # one of `Flag.choices`
TEXT = "text"
PATH = "path"  # a file or folder
URL = "url"  # a URL, a repository or a host:port

# bytes per value of each K/V cache type (ggml's block sizes: q8_0 is 34 bytes per 32 values …)
KV_BYTES: Mapping[str, float] = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32,
                                 "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
KV_TYPES: tuple[str, ...] = tuple(KV_BYTES)  # what llama.cpp's -ctk/-ctv take
# precision order (higher: closer to the model's own values)
KV_RANK: Mapping[str, int] = {"f32": 9, "f16": 8, "bf16": 8, "q8_0": 6, "q5_1": 5, "q5_0": 4, "q4_1": 3, "q4_0": 2,
                              "iq4_nl": 2}
SPLIT_MODES = ("none", "layer", "row", "tensor")
SPLIT_MODES_BY_ENGINE: Mapping[str, tuple[str, ...]] = {LLAMA_CPP: SPLIT_MODES,
                                                        IK_LLAMA_CPP: ("none", "layer", "graph", "attn")}
BOTH = frozenset(NAMES)
LLAMA_ONLY = frozenset({LLAMA_CPP})
IK_ONLY = frozenset({IK_LLAMA_CPP})

# why a flag needs the user's word (study/trust.py)
RUNS_PROGRAMS = "lets llama-server run programs or tools (shell commands, file edits, MCP servers)"
RUNS_FFMPEG = "makes llama-server run ffmpeg from a folder the study names"
WRITES_FILES = "makes llama-server write files where the study says"
SERVES_FILES = "makes llama-server serve or load local files"
READS_FILE = ("makes llama-server read a file the study names (a key, a template, weights in place of the model "
              "llamalab gives it) and serve or act on what is in it")
SENDS_TO_RPC = ("sends the model and the prompts to the rpc-servers it names (declare remote devices in "
                "[devices] rpc instead)")
DOWNLOADS = "makes llama-server download from the network"
DOWNLOADS_MODEL = "makes llama-server download a model from the network"


@dataclass(frozen=True)
class Flag:
    name: str  # canonical: the short name where llama-server has one
    aliases: tuple[str, ...] = ()  # the other spellings llama.cpp accepts
    kind: str = TEXT
    choices: tuple[str, ...] = ()
    bench: str | None = None  # llama-bench's flag for it
    bench_value: str | None = None  # the value llama-bench's flag takes where the server's is bare
    bench_skip: bool = False  # server-only: no speed of one stream changes with it, or llama-bench sets it itself
    risk: str | None = None  # why a study file that passes it needs the user's word
    engines: frozenset[str] = BOTH  # the engines that have it
    ik_names: tuple[str, ...] | None = None  # the spellings ik_llama.cpp takes, where it takes fewer than llama.cpp

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def takes_value(self) -> bool:
        return self.kind != BARE


def _risky(kind: str, risk: str, *groups: tuple[str, ...]) -> list[Flag]:
    return [Flag(g[0], g[1:], kind, risk=risk) for g in groups]


FLAGS: tuple[Flag, ...] = (
    # what llamalab sets, reads or searches
    Flag("-np", ("--parallel",), COUNT, bench_skip=True),
    Flag("-ts", ("--tensor-split",), LIST, bench="-ts"),
    Flag("-sm", ("--split-mode",), CHOICE, SPLIT_MODES, bench="-sm"),
    Flag("-fitt", ("--fit-target",), LIST, bench_skip=True, engines=LLAMA_ONLY),
    # ik_llama.cpp: `--fit` alone (no value), which moves MoE experts to the CPU only
    Flag("-fit", ("--fit",), CHOICE, ("on", "off"), bench_skip=True, ik_names=("--fit",)),
    Flag("-fitc", ("--fit-ctx",), COUNT, bench_skip=True, engines=LLAMA_ONLY),
    Flag("-c", ("--ctx-size",), COUNT, bench_skip=True),
    Flag("-cram", ("--cache-ram",), INT, bench_skip=True),
    Flag("-fa", ("--flash-attn",), CHOICE, ("on", "off", "auto"), bench="-fa"),
    Flag("-ngl", ("--gpu-layers", "--n-gpu-layers"), TEXT, bench="-ngl"),  # a number, `auto` or `all`
    Flag("-ctk", ("--cache-type-k",), CHOICE, KV_TYPES, bench="-ctk"),
    Flag("-ctv", ("--cache-type-v",), CHOICE, KV_TYPES, bench="-ctv"),
    Flag("-ub", ("--ubatch-size",), COUNT, bench="-ub"),
    Flag("-b", ("--batch-size",), COUNT, bench="-b"),
    Flag("-t", ("--threads",), INT, bench="-t"),
    Flag("-mg", ("--main-gpu",), INT, bench="-mg"),
    Flag("-ot", ("--override-tensor",), TEXT, bench="-ot"),
    Flag("-cmoe", ("--cpu-moe",), BARE),
    Flag("-ncmoe", ("--n-cpu-moe",), COUNT),
    Flag("--no-op-offload", (), BARE, bench="-nopo", bench_value="1", engines=LLAMA_ONLY),
    Flag("-nkvo", ("--no-kv-offload",), BARE, bench="-nkvo", bench_value="1"),
    Flag("-kvu", ("--kv-unified",), BARE, bench_skip=True, engines=LLAMA_ONLY),
    Flag("-no-kvu", ("--no-kv-unified",), BARE, bench_skip=True, engines=LLAMA_ONLY),
    Flag("--host", (), TEXT, bench_skip=True),
    Flag("--port", (), COUNT, bench_skip=True),
    Flag("--reuse-port", (), BARE),
    Flag("-lv", ("--verbosity", "--log-verbosity"), INT, bench_skip=True, ik_names=("--verbosity",)),
    Flag("--log-disable", (), BARE, bench_skip=True),
    # ik_llama.cpp's own (its common/common.cpp): run-time repacking, graph reuse, MLA, fused MoE, the fit's margin
    Flag("-rtr", ("--run-time-repack",), BARE, engines=IK_ONLY),
    Flag("-gr", ("--graph-reuse",), BARE, bench_skip=True, engines=IK_ONLY),
    Flag("-no-gr", ("--no-graph-reuse",), BARE, bench_skip=True, engines=IK_ONLY),
    Flag("-mla", ("--mla-use",), INT, engines=IK_ONLY),
    Flag("-no-fmoe", ("--no-fused-moe",), BARE, engines=IK_ONLY),
    Flag("--fit-margin", (), COUNT, bench_skip=True, engines=IK_ONLY),
    Flag("--metrics", (), BARE, bench_skip=True),
    Flag("--no-warmup", (), BARE, bench_skip=True),
    Flag("--rpc", (), URL, bench="-rpc", risk=SENDS_TO_RPC),
    Flag("--slot-save-path", (), PATH, bench_skip=True, risk=WRITES_FILES),
    # what only the trust gate needs to know
    *_risky(TEXT, RUNS_PROGRAMS, ("--tools",), ("--tools-runtime",), ("-ag", "--agent"), ("--mcp-servers-config",),
            ("--mcp-servers-json",), ("--ui-mcp-proxy", "--webui-mcp-proxy")),
    *_risky(PATH, RUNS_FFMPEG, ("--video-ffmpeg-dir",)),
    *_risky(PATH, WRITES_FILES, ("--log-file",), ("--log-prompts-dir",), ("-lcd", "--lookup-cache-dynamic")),
    *_risky(PATH, SERVES_FILES, ("--path",), ("--media-path",), ("--models-dir",), ("--models-preset",)),
    *_risky(PATH, READS_FILE, ("-m", "--model"), ("--lora",), ("--lora-scaled",), ("--control-vector",),
            ("--control-vector-scaled",), ("-md", "--model-draft", "--spec-draft-model"), ("-mm", "--mmproj"),
            ("-mv", "--model-vocoder"), ("--grammar-file",), ("-jf", "--json-schema-file"),
            ("-lcs", "--lookup-cache-static"), ("--chat-template-file",), ("--api-key-file",), ("--ssl-key-file",),
            ("--ssl-cert-file",), ("--ui-config-file", "--webui-config-file"), ("--prompt-cache",),
            ("--prompt-cache-ro",), ("-f", "--file"), ("--system-prompt-file", "-sysf")),
    *_risky(URL, DOWNLOADS, ("-mu", "--model-url"), ("-hf", "-hfr", "--hf-repo"), ("-hff", "--hf-file"),
            ("-hft", "--hf-token"), ("-dr", "--docker-repo"), ("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf"),
            ("-mmu", "--mmproj-url"), ("-hfv", "-hfrv", "--hf-repo-v"), ("-hffv", "--hf-file-v")),
)

_BY_NAME: dict[str, Flag] = {n: f for f in FLAGS for n in f.names}


def name_of(arg: str) -> str:
    """The flag an argument names, as llama.cpp reads it: without its `=value`, and `_` read as `-` in a long option
    (`--log_file=x` → `--log-file`). A short option or a value is returned as written (up to any `=`)."""
    name = arg.partition("=")[0]
    return name.replace("_", "-") if name.startswith("--") else name


def flag(arg: str) -> Flag | None:
    """The flag an argument names (any spelling, `=value` and `_` read as llama.cpp reads them), or None where the
    table does not have it."""
    return _BY_NAME.get(name_of(arg))


def canonical(arg: str) -> str:
    """The canonical name of the flag an argument names (`--n_gpu_layers=5` → `-ngl`); a flag the table does not
    have as llama.cpp reads it."""
    f = flag(arg)
    return f.name if f else name_of(arg)


def names(arg: str) -> tuple[str, ...]:
    """Every spelling of the flag an argument names, canonical first (`-np` → `("-np", "--parallel")`); a flag the
    table does not have alone."""
    f = flag(arg)
    return f.names if f else (name_of(arg),)


def lacks(engine: str, arg: str) -> str | None:
    """Why the engine does not take this flag, where the table knows (another engine's own flag, or a spelling it
    lacks); None where it takes it or the table does not have it."""
    f = flag(arg)
    if f is None:
        return None
    if engine not in f.engines:
        only = " and ".join(sorted(f.engines))
        return f"{name_of(arg)} is {only}'s alone: {engine} has no such flag"
    if engine == IK_LLAMA_CPP and f.ik_names is not None and name_of(arg) not in f.ik_names:
        return f"{engine} spells it {' or '.join(f.ik_names)} only"
    return None


def split_modes(engine: str) -> tuple[str, ...]:
    """The -sm values the engine takes."""
    return SPLIT_MODES_BY_ENGINE.get(engine, SPLIT_MODES)


def risk(arg: str) -> str | None:
    """Why a llama-server argument needs the user's word (see `Flag.risk`), or None. `--*-default` flags
    (`--gpt-oss-20b-default` and the like) download weights."""
    f = flag(arg)
    if f is not None and f.risk:
        return f.risk
    name = name_of(arg)
    if name.startswith("--") and name.endswith("-default"):
        return DOWNLOADS_MODEL
    return None
