"""The set-up `run`, `plan` and `tune` share: the study's backend, source and builds, the model, the devices, the
budget emulation and the llama-server arguments of a configuration. `run.runner` (the run loop), `plan.plan`
(dry runs) and `tune.tune` import it; none of them imports another for its set-up.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BuildError, ConfigError
from ..core.paths import cache_home
from ..fit import budget
from ..llamacpp import argv as argvmod
from ..llamacpp import binaries, engines, flags, source, sourceref, toolchain
from ..llamacpp import build as buildmod
from ..llamacpp import server as servermod
from ..llamacpp import vulkan as vulkanmod
from ..llamacpp.build import BuildArtifact, Builder
from ..logs import applicability
from ..machine import detect, gpu
from ..models import synthetic as models
from ..rig import devices, remote
from ..study.spec import BuildSpec, Config, Study, given_bin, hash_dump, rig_devices, with_budgets
from .options import RunOptions
from .progress import Progress


@dataclass
class Prepared:
    """Everything built and resolved before the first timed request."""

    study: Study
    backend: str
    source: source.Source
    model_path: Path
    model_info: models.ModelInfo
    artifacts: dict[str, BuildArtifact]
    skipped: dict[str, str]  # build name → reason
    topology: dict = field(default_factory=dict)  # local devices and remote endpoints (remote.topology)
    binaries: dict[str, binaries.Binaries] = field(default_factory=dict)  # given binaries, by folder
    vulkan_devices: list = field(default_factory=list)  # vulkan: every physical device this build sees
    local_gpus: int = 0  # cuda/rocm: GPUs this build sees
    not_applicable: dict[str, str] = field(default_factory=dict)  # build name → why it does not apply to this rig
    rig_devices: int = 0  # the devices min_devices counts (study.rig_devices)

    def inapplicable(self, cfg: Config) -> str | None:
        """llamalab's reason when a configuration does not apply to this rig (its build's or setting's
        min_devices), None when it does."""
        if cfg.build.name in self.not_applicable:
            return self.not_applicable[cfg.build.name]
        why = applicability.too_few_devices(cfg.min_devices, self.rig_devices, self.backend)
        return f"setting {cfg.setting.name}: {why}" if why else None


def resolve_backend(study: Study, home: Path | None = None, progress: Progress | None = None) -> str:
    """The study's backend; "auto" is chosen from this machine's GPUs and toolchains (detect.auto_backend)."""
    b = study.devices.backend
    if b == "auto":
        choice, why = detect.auto_backend(detect.facts(home or cache_home()), remotes=bool(study.devices.rpc))
        if progress:
            progress.message(f"devices.backend = \"auto\" → {choice}: {why}")
        return choice
    return b


def build_setup(backend: str, home: Path) -> tuple[dict[str, str], dict[str, str]]:
    """CMake definitions and build environment a backend needs on this machine: the CUDA architecture, the Vulkan
    toolchain prefix (scripts/vulkan-toolchain.sh), HIP's compiler and GPU targets."""
    if backend == "cuda":
        return {"CMAKE_CUDA_ARCHITECTURES": os.environ.get("LLAMALAB_CUDA_ARCH", "native")}, {}
    if backend == "vulkan":
        return toolchain.vulkan_defines(home), {}
    if backend == "rocm":
        return toolchain.hip_defines(), toolchain.hip_env()
    return {}, {}


def study_hash(study: Study, model_path: Path) -> str:
    """The key an unfinished run of this study and model is found by (`--fresh` aside): the study's fields as
    `study.spec.hash_dump` gives them (a field added to the model hashes only where it is set, so older runs still
    resume) and the model's path."""
    blob = json.dumps(hash_dump(study), separators=(",", ":"), ensure_ascii=False) + "|" + str(model_path)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def server_args(study: Study, cfg: Config, dev: devices.DeviceSetup, engine: str = engines.LLAMA_CPP) -> list[str]:
    """llama-server arguments for one configuration on a build of `engine` (pure): what llamalab adds of its own
    accord per engine is engines.OWN_ARGS (ik_llama.cpp: no -kvu, no -fitt, its -ts counting the CPU first)."""
    eng = engines.get(engine)
    args = [*study.server.args, *cfg.build.args, *cfg.setting.args, *dev.server_args]
    if not argvmod.has(args, *argvmod.PARALLEL):  # a setting may choose its own slots
        args += ["-np", str(study.server.parallel or max(4, max(study.workload.concurrency)))]
    if eng.unified_kv:
        args += ["-kvu"]
    # No host-RAM prompt cache: with it, each new request first copies the idle slots' KV state to host memory
    # (measured on an H200: ~750 ms before the first token after a 4-request level), which is neither prompt
    # nor generation time and not what a study of build options measures. Requests use cache_prompt: false anyway.
    if not argvmod.has(args, *argvmod.CACHE_RAM):
        args += ["-cram", "0"]
    if study.server.ctx:
        args += ["-c", str(study.server.ctx)]
    if study.server.fit_target_mib and eng.fit_target:
        args += ["-fitt", ",".join(str(x) for x in study.server.fit_target_mib)]
    # ik_llama.cpp's layer split over rpc-servers: the study's -ts, else the budgets' (as budget emulation gives
    # llama.cpp), with the CPU's 0 in front
    given = argvmod.tensor_split(args) or ([float(b) for b in study.devices.budgets_mib]
                                           if study.devices.budgets_mib and len(study.devices.budgets_mib) > 1
                                           else None)
    split = engines.device_split(eng, dev.backend, given, dev.count)
    if split is not None and dev.count > 1:
        args = argvmod.replaced(args, ["-ts", ",".join(split)])
    return args


def prepare(study: Study, opts: RunOptions, progress: Progress) -> Prepared:
    """The set-up `run`, `build`, `plan` and `tune` share. What the user gave is checked before anything is
    contacted, fetched or built: the model's header first (before the machine is even probed for its backend), then
    the given binaries (against that backend), then the remote endpoints (exposure warnings, reachability, ssh
    logins); only then are sources fetched and built. The study prepared is the one under --budget's budgets
    (`opts.budgets_mib`, `with_budgets`), which every stage after this one reads."""
    study = with_budgets(study, opts.budgets_mib)
    user_model = opts.model or study.model.path
    if user_model:
        model_path = Path(user_model).expanduser()
        info = models.read_info(model_path)
    backend = resolve_backend(study, opts.home, progress)
    given = given_binaries(study, backend, progress)
    if study.devices.rpc:
        remote.preflight(study.devices.rpc, progress.warn)
    defaults = default_sources(study, opts, given, progress)  # engine → the source of builds that name none
    own = build_sources(study, opts, given, progress)  # builds with a source of their own (a versions study)
    if not user_model:
        model_path = models.synthetic(models.preset(study.model.preset or "tiny"), opts.home)
        info = models.read_info(model_path)
    builders = _Builders(study, opts, backend, progress)
    n_devices = rig_devices(study, backend)
    not_applicable = _not_applicable(study, n_devices, backend, progress)
    artifacts: dict[str, BuildArtifact] = {}
    skipped: dict[str, str] = {}
    kv = kv_types(study)
    for spec in study.builds:
        if spec.name in not_applicable:
            continue
        if spec.name in given:
            artifacts[spec.name] = binaries.artifact(given[spec.name], spec.name, builders.build_backend)
            continue
        engine = build_engine(spec, None, defaults)
        builder = builders.for_source(own.get(spec.name, defaults.get(engine)),
                                      own_source=spec.name in own)
        if builder is None:
            skipped[spec.name] = no_source_reason(spec, study.source.bin or "", given)
            progress.warn(f"skipping build {spec.name}: {skipped[spec.name]}")
            continue
        made = _build_one(spec, builder, progress, engines.kernel_cut(builder.engine, kv, spec.cmake))
        if isinstance(made, str):
            skipped[spec.name] = made
        else:
            artifacts[spec.name] = made
    _check_built(study, artifacts, skipped, not_applicable)
    if not all(b.source for b in study.builds if b.name in artifacts):  # unless comparing sources is the study
        for line in mixed_binaries(artifacts):
            progress.warn(line)
    first = next(iter(artifacts.values()))
    vk_devices, local_gpus = _local_gpus(backend, first, progress)
    topology = _topology(study, backend, first, progress)
    first_given = next((given[b.name] for b in study.builds if b.name in given), None)
    src = defaults.get(engines.LLAMA_CPP) or next(iter(defaults.values()), None) or next(iter(own.values()), None) \
        or first_given.source()  # type: ignore[union-attr]
    return Prepared(study=study, backend=backend, source=src, model_path=model_path, model_info=info,
                    artifacts=artifacts, skipped=skipped, topology=topology,
                    binaries={str(b.dir): b for b in given.values()}, vulkan_devices=vk_devices,
                    local_gpus=local_gpus, not_applicable=not_applicable, rig_devices=n_devices)


class _Builders:
    """One Builder per source a study builds from, made when a build first needs it."""

    def __init__(self, study: Study, opts: RunOptions, backend: str, progress: Progress) -> None:
        self.study, self.opts, self.backend, self.progress = study, opts, backend, progress
        self.extra, self.build_env = build_setup(backend, opts.home)
        self.build_backend = "cpu-rpc" if backend == "rpc" else backend  # remote devices only: llama-server with RPC
        self.builders: dict[str, Builder] = {}

    def for_source(self, s: source.Source | None, *, own_source: bool) -> Builder | None:
        if s is None:
            return None
        if s.key not in self.builders:
            # a version's tree (and ik_llama.cpp's, whose compile is long) builds only what the run starts; the
            # default llama.cpp source's tree keeps every program (plan, plancheck and the crosscheck use them)
            targets = needed_targets(self.study, self.backend, crosscheck=self.opts.crosscheck) \
                if own_source or s.engine != engines.LLAMA_CPP else buildmod.DEFAULT_TARGETS
            self.builders[s.key] = Builder(source=s, backend=self.build_backend, home=self.opts.home,
                                           targets=targets, jobs=self.opts.jobs or (os.cpu_count() or 2),
                                           extra_defines=self.extra, build_env=self.build_env,
                                           progress=self.progress.build, log=self.progress.message)
        return self.builders[s.key]


def _not_applicable(study: Study, n_devices: int, backend: str, progress: Progress) -> dict[str, str]:
    """Build name → why it does not apply to this rig (min_devices): said once, here, and never built; a setting
    that does not apply is said here too."""
    out: dict[str, str] = {}
    for spec in study.builds:
        why = applicability.too_few_devices(spec.min_devices or 1, n_devices, backend)
        if why:
            out[spec.name] = why
            progress.message(f"build {spec.name} does not apply to this rig: {why}")
    for st in study.settings:
        why = applicability.too_few_devices(st.min_devices or 1, n_devices, backend)
        if why:
            progress.message(f"setting {st.name} does not apply to this rig: {why}")
    return out


def _build_one(spec: BuildSpec, builder: Builder, progress: Progress, cut: dict[str, str] | None = None
               ) -> BuildArtifact | str:
    """A build's artifact, or why it was skipped (OpenBLAS missing, the build failed). `cut`: the engine's kernel cut
    (engines.kernel_cut), options of the build like its own."""
    if "openblas" in spec.requires:
        ok, why = buildmod.openblas_available()
        if not ok:
            progress.warn(f"skipping build {spec.name}: {why}")
            return why
    if cut:
        progress.message(f"build {spec.name}: {' '.join(f'-D{k}={v}' for k, v in cut.items())} (no configuration "
                         "uses the kernels it leaves out; engines.kernel_cut)")
    try:
        return builder.build(spec.name, {**(cut or {}), **spec.cmake})
    except BuildError as e:
        progress.warn(str(e))
        return f"build failed: {e.message}"
    finally:
        progress.build_done()


def _check_built(study: Study, artifacts: dict[str, BuildArtifact], skipped: dict[str, str],
                 not_applicable: dict[str, str]) -> None:
    """Unknown llama-server flags (a user mistake) and a study with nothing to run are said before anything runs."""
    for spec in study.builds:
        if spec.name in artifacts:
            art = artifacts[spec.name]
            for st in study.settings:
                args = [*study.server.args, *spec.args, *st.args]
                servermod.check_flags(art.binary("llama-server"), args, env=art.env(), engine=art.engine)
    if not artifacts and not skipped:
        raise ConfigError("no build of this study applies to this rig: " + "; ".join(
            f"{k}: {v}" for k, v in not_applicable.items()),
            tip="run it on a rig with more devices, or raise [devices] count (local rpc-servers, or virtual CUDA "
                "devices on one GPU).")
    if not artifacts:
        raise BuildError("no build of this study could be made: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()),
                         tip="pass --llama-cpp DIR to build them from a source, or give the study a build without "
                             "cmake options to run the binaries" if study.source.bin else
                             "run `llamalab doctor` to see what this machine lacks.")


def _local_gpus(backend: str, first: BuildArtifact, progress: Progress) -> tuple[list, int]:
    """Vulkan: every physical device this build sees; CUDA and ROCm: how many GPUs it sees."""
    if backend == "vulkan":
        vk_devices = vulkanmod.physical_devices(first.binary("llama-server"), first.env())
        for d in vk_devices:
            progress.message(f"Vulkan device #{d.index}: {d.description}, {d.free_mib:,} MiB free"
                             + (" (a CPU implementation)" if d.software else ""))
        return vk_devices, 0
    if backend == "cuda":
        return [], len(gpu.probe())
    if backend == "rocm":
        return [], devices.count_named(first.binary("llama-server"), "ROCm", first.env())
    return [], 0


def given_binaries(study: Study, backend: str, progress: Progress) -> dict[str, binaries.Binaries]:
    """Build name → the binaries it runs (--llama-bin / [source] bin, or its own bin), each folder probed once
    and checked against the study's devices before anything else happens."""
    probed: dict[str, binaries.Binaries] = {}
    out: dict[str, binaries.Binaries] = {}
    local_rpc = backend == "cpu-rpc" or any(r.ssh and not r.rpc_server_path for r in study.devices.rpc)
    for spec in study.builds:
        folder = given_bin(study, spec)
        if folder is None:
            continue
        where = f"builds[{spec.name}].bin" if spec.bin is not None else "--llama-bin (source.bin)"
        if folder not in probed:
            b = binaries.probe(folder, where)
            binaries.check_devices(b, backend, local_rpc=local_rpc, where=where)
            progress.message(f"binaries {b.describe()}")
            probed[folder] = b
        b = probed[folder]
        if spec.engine is not None and spec.engine != b.engine:
            if spec.bin is not None:
                raise ConfigError(f"build {spec.name} says engine = {spec.engine!r}, but its binaries in {b.dir} are "
                                  f"{b.engine}'s (their own --version says so).",
                                  tip="give it binaries of its engine, or drop its engine key.")
            continue  # --llama-bin's binaries are another engine's: this build is made from its own engine's source
        out[spec.name] = b
    return out


def checkout(study: Study, opts: RunOptions) -> Path | None:
    """The user's llama.cpp folder: --llama-cpp, else [source] llama_cpp (also the repository of `git:REV`)."""
    return opts.llama_cpp or (Path(study.source.llama_cpp).expanduser() if study.source.llama_cpp else None)


def build_engine(spec: BuildSpec, given: binaries.Binaries | None, defaults: dict[str, source.Source]) -> str:
    """The engine of a build (pure): its own `engine`, else its given binaries', else that of the checkout it is
    made from (the only default source of a study that names no engine), else llama.cpp."""
    if spec.engine is not None:
        return spec.engine
    if given is not None:
        return given.engine
    if len(defaults) == 1:
        return next(iter(defaults))
    return engines.LLAMA_CPP


def default_sources(study: Study, opts: RunOptions, given: dict[str, binaries.Binaries], progress: Progress
                    ) -> dict[str, source.Source]:
    """Engine → the source its builds that name none are made from: --llama-cpp (else [source] llama_cpp) for the
    engine that checkout holds (and for builds that name no engine), else the engine's pinned release — except in a
    study that gives binaries ([source] bin), which never compiles anything it was not given a source for. Empty
    where nothing is to be built from a default source."""
    rest = [b for b in study.builds if b.name not in given and b.source is None]
    if not rest:
        return {}
    explicit = checkout(study, opts)
    co = source.from_dir(explicit) if explicit else None
    out: dict[str, source.Source] = {}
    for spec in rest:
        engine = spec.engine or (co.engine if co is not None else engines.LLAMA_CPP)
        if engine in out:
            continue
        if co is not None and co.engine == engine:
            out[engine] = co
        elif study.source.bin is None:
            out[engine] = source.pinned(opts.home, pin=source.DEFAULT_PIN[engine], log=progress.message)
        else:
            continue
        progress.message(out[engine].describe())
    return out


def kv_types(study: Study) -> set[str]:
    """Every K/V cache type the study's arguments name (-ctk, -ctv, any spelling), and those its `[tune] kv` pairs
    name where it searches another engine (tune runs them) (pure)."""
    arg_lists = [study.server.args, *(b.args for b in study.builds), *(s.args for s in study.settings)]
    names = (*flags.names("-ctk"), *flags.names("-ctv"))
    tuned = study.tune.kv if study.tune is not None and len(study.tune.engines) > 1 else []
    return {v for args in arg_lists for _, v in argvmod.occurrences(args, *names)} | \
        {t for pair in tuned for t in pair.split("/")}


def needed_targets(study: Study, backend: str, *, crosscheck: bool = False) -> tuple[str, ...]:
    """The programs a run (or a dry run) of this study starts (pure): llama-server; the rpc-server where llamalab
    starts rpc-servers (local ones, or over ssh without a path of their own); llama-perplexity for the output
    check's logits; llama-bench for the crosscheck."""
    out = ["llama-server"]
    if backend == "cpu-rpc" or any(r.ssh and not r.rpc_server_path for r in study.devices.rpc):
        out.append("ggml-rpc-server")
    if study.outputs.logits and len(study.builds) > 1:  # each build's logits against the baseline's
        out.append("llama-perplexity")
    if crosscheck:
        out.append("llama-bench")
    return tuple(out)


def build_sources(study: Study, opts: RunOptions, given: dict[str, binaries.Binaries], progress: Progress
                  ) -> dict[str, source.Source]:
    """Build name → the source of a build that names its own (`builds[].source`), each fetched, exported or
    checked once, in study order, before anything is built."""
    out: dict[str, source.Source] = {}
    seen: dict[str, source.Source] = {}
    for spec in study.builds:
        if spec.source is None or spec.name in given:
            continue
        if spec.source not in seen:
            s = source.resolve(sourceref.parse(spec.source), opts.home, checkout=checkout(study, opts),
                               log=progress.message)
            progress.message(f"build {spec.name}: {s.describe()}")
            seen[spec.source] = s
        if spec.engine is not None and seen[spec.source].engine != spec.engine:
            raise ConfigError(f"build {spec.name} says engine = {spec.engine!r}, but its source {spec.source} holds "
                              f"{seen[spec.source].engine}.",
                              tip="give it a source of its engine, or drop its engine key.")
        out[spec.name] = seen[spec.source]
    return out


def no_source_reason(spec: BuildSpec, folder: str, given: dict[str, binaries.Binaries]) -> str:
    """Why a build with CMake options is not measured in a study of given binaries without a source (pure)."""
    opts = buildmod.normalize(spec.cmake)
    commit = next((b.version.commit for b in given.values() if b.version.commit), None)
    if set(opts) == {buildmod.COPIES}:
        what = (f"a copies variant ({buildmod.COPIES}={opts[buildmod.COPIES]}) is a rebuild of ggml-base from a "
                "llama.cpp source")
    else:
        what = f"it needs {' '.join(f'-D{k}={v}' for k, v in opts.items())}, a build from a llama.cpp source"
    return (f"{what}, and this study has only the binaries in {folder}: add --llama-cpp DIR"
            + (f" (a checkout of their commit {commit})" if commit else "") + " to build it")


def mixed_binaries(artifacts: dict[str, BuildArtifact]) -> list[str]:
    """A warning when builds of one engine run on different binaries (given ones beside built ones, or two
    folders): their differences then include everything that differs between those binaries (pure). Builds of
    different engines differ by their engine: that is what such a study compares."""
    out = []
    for engine in dict.fromkeys(a.engine for a in artifacts.values()):
        where: dict[str, list[str]] = {}
        for name, art in artifacts.items():
            if art.engine != engine:
                continue
            if art.given:
                key = (f"binaries {art.given.get('version', '?')} ({(art.given.get('commit') or '?')[:9]}) in "
                       f"{art.bin_dir}")
            else:
                key = f"a build of {art.source.version} ({art.source.short_commit}) from {art.source.origin}"
            where.setdefault(key, []).append(name)
        if len(where) >= 2:
            what = "llama.cpp" if engine == engines.LLAMA_CPP else engine
            out.append(f"the builds run on different {what} binaries, so their differences include the binaries' "
                       "own: " + "; ".join(f"{', '.join(names)} on {k}" for k, names in where.items()))
    return out


def _topology(study: Study, backend: str, art: BuildArtifact, progress: Progress) -> dict:
    """The devices before the first run: local count, and what each remote endpoint llamalab does not start
    offers (those it starts over ssh are asked when they run)."""
    specs = study.devices.rpc
    unmanaged = [s.endpoint for s in specs if not s.ssh]
    found = remote.query_offers(art.binary("llama-server"), unmanaged, env=art.env(),
                                declared={s.endpoint: s.backend for s in specs})
    for line in remote.describe(found):
        progress.message(f"remote device {line}")
    local = {"rpc": 0, "cpu": 1}.get(backend, study.devices.count)
    return remote.topology(backend, local, found, specs)


@contextmanager
def device_setup(prep: Prepared, art: BuildArtifact, log_dir: Path):
    """The study's local devices, with its remote rpc-servers (started over ssh where asked) joined to them."""
    with _local_devices(prep, art, log_dir) as dev:
        if prep.study.devices.rpc:
            with remote.attached(dev, prep.study.devices.rpc, art, log_dir) as joined:
                yield joined
        else:
            yield dev


@contextmanager
def _local_devices(prep: Prepared, art: BuildArtifact, log_dir: Path):
    d = prep.study.devices
    if prep.backend == "cpu-rpc":
        with devices.local_rpc(art, d.count, log_dir, host=d.host, threads=d.rpc_threads) as dev:
            yield dev
    elif prep.backend == "cuda":
        with devices.cuda(d.count, prep.local_gpus or len(gpu.probe())) as dev:
            yield dev
    elif prep.backend == "vulkan":
        with devices.vulkan(d.count, prep.vulkan_devices) as dev:
            yield dev
    elif prep.backend == "rocm":
        with devices.rocm(d.count, prep.local_gpus) as dev:
            yield dev
    elif prep.backend == "cpu":
        with devices.cpu() as dev:
            yield dev
    elif prep.backend == "rpc":
        with devices.none() as dev:
            yield dev
    else:
        raise ConfigError(f"backend {prep.backend!r} is not supported by this llamalab yet.",
                          tip="use cpu-rpc, cuda, vulkan, rocm or cpu.")


def budget_emulation(study: Study, art: BuildArtifact, dev: devices.DeviceSetup, env: dict[str, str],
                     user_args: list[str]) -> budget.Emulation | None:
    """With memory budgets (the study's `[devices] vram`, or --budget's: `study.spec.with_budgets`), how these
    devices stand in for the budgeted ones, computed from what llama.cpp reports free right now (see budget.py); None
    without budgets, and on an engine without -fitt (ik_llama.cpp: configplan.engine_context). A budget that cannot
    be emulated here is a ConfigError: the whole study stops, since every configuration would fail the same way."""
    budgets = study.devices.budgets_mib
    if not budgets or not engines.get(art.engine).fit_target:
        return None  # an engine without -fitt: its context is searched by loads (configplan.engine_context)
    mem = devices.list_memory(art.binary("llama-server"), dev.server_args, env)
    return budget.emulate(budgets, mem, margins_mib=study.server.fit_target_mib, user_args=user_args)


def check_budgets(prep: Prepared, progress: Progress) -> None:
    """With `[devices] vram`: start the devices once and check that they can stand in for the budgeted ones (a
    ConfigError if not), so that a study that cannot run stops before it writes anything. Each configuration checks
    again when it starts (free memory may change meanwhile)."""
    if not prep.study.devices.budgets_mib or not prep.artifacts:
        return
    art = next(iter(prep.artifacts.values()))
    progress.message("checking the [devices] vram budgets against what the devices report free")
    with tempfile.TemporaryDirectory(prefix="llamalab-budgets-") as tmp:
        with device_setup(prep, art, Path(tmp)) as dev:
            budget_emulation(prep.study, art, dev, {**art.env(), **dev.env}, [*prep.study.server.args,
                                                                             *dev.server_args])


def emulate_budgets(study: Study, art: BuildArtifact, dev: devices.DeviceSetup, env: dict[str, str],
                    args: list[str]) -> tuple[list[str], dict | None]:
    """The server arguments with the budgets' -fitt (and -ts) in place, and the emulation as stored."""
    emu = budget_emulation(study, art, dev, env, args)
    return (args, None) if emu is None else (argvmod.replaced(args, emu.args()), emu.as_dict())
