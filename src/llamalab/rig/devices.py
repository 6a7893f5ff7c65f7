"""Devices a study runs on: how many, what llama-server needs to see them, and starting any helpers.

* `cpu-rpc`: N local `rpc-server` processes on free 127.0.0.1 ports, so that llama.cpp sees N devices and
  pipeline parallelism really activates on a machine without GPUs (llama-cpp-facts.md §3).
* `cuda`: NVIDIA GPUs; when the study asks for more devices than there are GPUs, `GGML_CUDA_DEVICES=N`
  splits the GPUs into N virtual devices (recorded as virtual).
* `vulkan`: Vulkan devices chosen with `GGML_VK_VISIBLE_DEVICES`; more devices than GPUs list a GPU twice
  (`0,0`) and name the devices (`-dev Vulkan0,Vulkan1`), since llama.cpp otherwise skips a second device with the
  same PCI id (vulkan.py). Mesa's lavapipe (a CPU device) is used only when asked for explicitly.
* `rocm`: AMD GPUs through HIP (`ROCm0` …); like CUDA, `GGML_CUDA_DEVICES=N` (ggml-cuda's code, which HIP builds
  share) gives virtual devices, `HIP_VISIBLE_DEVICES` chooses fewer.
* `cpu`: the host alone (one device; pipeline parallelism never activates).
* `rpc`: no local device; the study's remote rpc-servers (`[devices] rpc = [...]`, see remote.py) are all there
  is. Remote endpoints can also join `cpu-rpc` and `cuda` setups.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..core import net, proc
from ..core.errors import ConfigError, LaunchError
from ..core.records import JsonObject
from ..llamacpp import argv
from ..llamacpp import vulkan as vk
from ..llamacpp.build import BuildArtifact
from ..logs import devicelist


@dataclass(frozen=True)
class DeviceSetup:
    """What a running llama-server needs to see the study's devices."""

    backend: str
    count: int
    server_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    virtual: bool = False
    endpoints: tuple[str, ...] = ()
    description: str = ""
    remotes: tuple[JsonObject, ...] = ()  # remote devices (remote.RemoteDevice.as_dict): endpoint, memory, backend
    gpu_of: tuple[int, ...] = ()  # physical GPU (driver index) of each local device, where known

    def as_dict(self) -> JsonObject:
        return {
            "backend": self.backend, "count": self.count, "server_args": list(self.server_args),
            "env": dict(self.env), "virtual": self.virtual, "endpoints": list(self.endpoints),
            "description": self.description, "remotes": [dict(r) for r in self.remotes],
            "gpu_of": list(self.gpu_of),
        }


def rpc_server_argv(binary: Path, host: str, port: int, threads: int | None) -> list[str]:
    argv = [str(binary), "-H", host, "-p", str(port)]
    if threads:
        argv += ["-t", str(threads)]
    return argv


@contextmanager
def local_rpc(build: BuildArtifact, count: int, log_dir: Path, *, host: str = "127.0.0.1",
              threads: int | None = None, ready_timeout_s: float = 30.0) -> Iterator[DeviceSetup]:
    """Start `count` rpc-servers from `build`, yield the llama-server arguments that use them, stop them."""
    if count < 1:
        raise ConfigError("[devices] count must be at least 1 for cpu-rpc.")
    # a host other than loopback was accepted before anything ran: by the user's --host (warned), or by
    # --trust-study for a study file that asks for it (refused without it: see trust.py)
    binary = build.binary("ggml-rpc-server")
    if not binary.is_file():
        raise LaunchError(f"rpc-server not found at {binary}",
                          tip="the build needs -DGGML_RPC=ON and the ggml-rpc-server target.")
    if threads is None:
        threads = max(1, (os.cpu_count() or 2) // count)
    endpoints: list[str] = []
    with ExitStack() as stack:
        for i in range(count):
            for attempt in range(3):  # a port taken between choosing and binding: choose again
                port = net.free_port(host)
                log_path = log_dir / f"rpc-server-{i}.log"
                child = proc.spawn(rpc_server_argv(binary, host, port, threads), log_path=log_path, env=build.env(),
                                   ignore_sigpipe=True)  # a client killed mid-request must not kill it
                stack.callback(child.terminate)
                if net.wait_port(host, port, ready_timeout_s, alive=child.alive):
                    break
                child.terminate()
                if attempt == 2 or (child.returncode not in (None, 0)
                                    and "bind" not in " ".join(child.log_tail(5)).lower()):
                    tail = "\n".join("    " + ln for ln in child.log_tail(10))
                    raise LaunchError(f"rpc-server {i} did not start listening on {host}:{port}. "
                                      f"Log: {log_path}\n{tail}",
                                      tip="check that the build has the RPC backend and that the port range is usable.")
            endpoints.append(f"{host}:{port}")
        yield DeviceSetup(
            backend="cpu-rpc", count=count, server_args=("--rpc", ",".join(endpoints)),
            endpoints=tuple(endpoints), virtual=False,
            description=f"{count} local rpc-server processes (CPU) on {', '.join(endpoints)}",
        )


@contextmanager
def cuda(count: int, physical: int) -> Iterator[DeviceSetup]:
    """CUDA devices; `count` > `physical` splits the GPUs into virtual devices with GGML_CUDA_DEVICES."""
    if physical < 1:
        raise LaunchError("the study asks for CUDA devices, but no NVIDIA GPU was found.",
                          tip="run `llamalab doctor`; on a machine without a GPU use backend = \"cpu-rpc\".")
    env: dict[str, str] = {}
    virtual = count > physical
    if virtual:
        env["GGML_CUDA_DEVICES"] = str(count)
    desc = (f"{count} virtual CUDA devices on {physical} GPU(s) (GGML_CUDA_DEVICES={count})" if virtual
            else f"{count} CUDA GPU(s)")
    if count < physical:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
    yield DeviceSetup(backend="cuda", count=count, env=env, virtual=virtual, description=desc,
                      gpu_of=tuple(i % physical for i in range(count)))


@contextmanager
def vulkan(count: int, physical: Sequence[vk.PhysicalDevice]) -> Iterator[DeviceSetup]:
    """Vulkan devices: `count` of them from the physical devices llama.cpp sees (vulkan.select)."""
    try:
        sel = vk.select(count, physical)
    except LookupError:
        raise LaunchError("the study asks for Vulkan devices, but llama.cpp's Vulkan backend sees none.",
                          tip="run `llamalab doctor` and `vulkaninfo --summary`; on a machine without a GPU install "
                          "Mesa's lavapipe (apt-get install mesa-vulkan-drivers) or use backend = \"cpu-rpc\".",
                          ) from None
    yield DeviceSetup(backend="vulkan", count=count, server_args=sel.server_args, env=sel.env, virtual=sel.virtual,
                      description=sel.describe(), gpu_of=sel.indices)


@contextmanager
def rocm(count: int, physical: int) -> Iterator[DeviceSetup]:
    """AMD GPUs through HIP; `count` > `physical` splits them into virtual devices with GGML_CUDA_DEVICES."""
    if physical < 1:
        raise LaunchError("the study asks for ROCm devices, but llama.cpp's HIP backend sees no AMD GPU.",
                          tip="run `llamalab doctor` and `rocm-smi`; check that this user may open /dev/kfd "
                          "(group render/video).")
    env: dict[str, str] = {}
    virtual = count > physical
    if virtual:
        env["GGML_CUDA_DEVICES"] = str(count)
    if count < physical:
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
    desc = (f"{count} virtual ROCm devices on {physical} GPU(s) (GGML_CUDA_DEVICES={count})" if virtual
            else f"{count} ROCm GPU(s)")
    yield DeviceSetup(backend="rocm", count=count, env=env, virtual=virtual, description=desc,
                      gpu_of=tuple(i % physical for i in range(count)))


@contextmanager
def cpu() -> Iterator[DeviceSetup]:
    yield DeviceSetup(backend="cpu", count=1, description="the CPU alone")


@contextmanager
def none() -> Iterator[DeviceSetup]:
    """No local device: backend "rpc", where every device is a remote rpc-server (remote.attached adds them)."""
    yield DeviceSetup(backend="rpc", count=0, description="")


def count_named(binary: Path, prefix: str, env: dict[str, str] | None = None) -> int:
    """How many devices whose name starts with `prefix` (ROCm, CUDA, Vulkan) `llama-server --list-devices` shows."""
    rc, out = proc.capture([str(binary), "--list-devices"], timeout_s=60, env=env)
    if rc != 0:
        return 0
    return sum(1 for d in devicelist.parse_devices(out.splitlines()) if d.name.startswith(prefix))


def list_memory(binary: Path, server_args: Sequence[str], env: dict[str, str] | None = None
                ) -> list[devicelist.DeviceMemory]:
    """The devices llama-server sees with these device arguments, and their memory (`--list-devices`, ~0.04 s,
    no model loaded): what budgets are emulated against."""
    # only the arguments that add devices; --rpc must come first
    dev_args = [x for _, v in argv.occurrences(server_args, "--rpc") if v for x in ("--rpc", v)]
    rc, out = proc.capture([str(binary), *dev_args, "--list-devices"], timeout_s=60, env=env)
    if rc != 0:
        raise LaunchError(f"`llama-server --list-devices` failed (exit {rc}): {out.strip()[-300:]}",
                          tip="check the build and, for cpu-rpc, that the rpc-servers started.")
    return devicelist.parse_devices(out.splitlines())
