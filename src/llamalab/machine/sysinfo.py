"""What machine a run happened on: CPU, RAM, OS, GPUs and driver, Python, llamalab and llama.cpp versions."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from .. import __version__
from ..core import proc
from ..core.records import JsonObject
from . import gpu


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        rc, out = proc.capture(["sysctl", "-n", "machdep.cpu.brand_string"])
        if rc == 0:
            return out.strip()
    return platform.processor() or platform.machine()


def ram_mib() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        return None


def gpu_tools() -> dict[str, str]:
    """Raw output of vendor tools where NVML is absent (nvidia-smi, vulkaninfo --summary, rocm-smi)."""
    out = {}
    for name, argv in (("nvidia-smi", ["nvidia-smi", "-L"]), ("vulkaninfo", ["vulkaninfo", "--summary"]),
                       ("rocm-smi", ["rocm-smi", "--showproductname", "--showmeminfo", "vram"])):
        rc, text = proc.capture(argv, timeout_s=20)
        if rc == 0 and text.strip():
            out[name] = text.strip()[:4000]
    return out


def collect(llama_cpp: JsonObject | None = None) -> JsonObject:
    gpus = gpu.probe()
    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "ram_mib": ram_mib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "llamalab": __version__,
        "gpus": [g.as_dict() for g in gpus],
        "gpu_driver": gpus[0].driver if gpus else None,
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "llama_cpp": llama_cpp,
    }
    if not gpus:
        tools = gpu_tools()
        if tools:
            info["gpu_tools"] = tools
    return info
