"""Helpers for tests that run real llama.cpp: a small, fast study and process inspection."""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

from llamalab.run import runner
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.store.db import Store
from llamalab.study import spec as studymod

# Two builds, one setting, tiny workload: a few seconds per configuration on 2 cores.
FAST = [
    'builds=[{name="copies4"},{name="copies1",cmake={GGML_SCHED_MAX_COPIES=1}}]',
    'settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]',
    "workload.repeats=2", "workload.prompt_tokens=64", "workload.output_tokens=8", "workload.warmup=0",
    "workload.concurrency=[1]",
]


def run_study(home: Path, data: Path, overrides: list[str], progress: Progress | None = None,
              ref: str = "demo", **opts) -> tuple[Store, str]:
    st, text = studymod.load(ref, overrides)
    o = RunOptions(home=home, db=data / "results.db", runs_dir=data / "runs", **opts)
    p = progress or Progress()
    prep = session.prepare(st, o, p)
    run_id = runner.execute(prep, text, o, p)
    return Store(o.db), run_id


def children_of(pid: int) -> set[int]:
    """Every process whose parent is `pid` (llama-server and rpc-servers run in their own sessions)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.add(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: set[int], timeout_s: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return set()
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def env_for(data: Path, home: Path) -> dict[str, str]:
    return {**os.environ, "LLAMALAB_DATA": str(data), "LLAMALAB_HOME": str(home), "PYTHONUNBUFFERED": "1"}


# ---------------------------------------------------------------- a build laid out as a release archive

def set_runpath_origin(path: Path) -> str | None:
    """Rewrite a 64-bit little-endian ELF file's DT_RUNPATH (or DT_RPATH) to `$ORIGIN` in place, as ggml-org's
    release builds are linked (-DCMAKE_INSTALL_RPATH='$ORIGIN'): the program then loads the libraries beside it,
    not those of the build tree it came from. Returns the old value (None: not such an ELF file, or no run path).
    The new string is shorter and NUL-padded, so nothing else in the file moves."""
    data = bytearray(path.read_bytes())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return None
    entries = []
    for j in range(dynamic[1] // 16):
        tag, val = struct.unpack_from("<qQ", data, dynamic[0] + 16 * j)
        if tag == 0:
            break
        entries.append((tag, val))
    strtab = next((v for t, v in entries if t == 5), None)  # DT_STRTAB
    if strtab is None:
        return None
    strtab_off = next(off + strtab - va for va, off, size in loads if va <= strtab < va + size)
    for tag, val in entries:
        if tag in (29, 15):  # DT_RUNPATH, DT_RPATH
            start = strtab_off + val
            end = data.index(b"\0", start)
            old = data[start:end].decode()
            new = b"$ORIGIN"
            if len(new) > end - start:
                return None
            data[start:end] = new + b"\0" * (end - start - len(new))
            path.write_bytes(bytes(data))
            return old
    return None


def release_like(bin_dir: Path, dest: Path, *, programs: dict[str, str] | None = None, libs: bool = True) -> Path:
    """Copy a build's programs and .so files side by side into `dest`, as `llama-bNNNN-bin-ubuntu-x64.tar.gz`
    unpacks (programs and libraries in one folder, run path `$ORIGIN`). `programs` maps build file → name in the
    copy (default: llama-server, llama-fit-params, llama-bench, and ggml-rpc-server under its older name
    rpc-server)."""
    programs = programs if programs is not None else {
        "llama-server": "llama-server", "llama-fit-params": "llama-fit-params", "llama-bench": "llama-bench",
        "ggml-rpc-server": "rpc-server"}
    dest.mkdir(parents=True)
    for src, name in programs.items():
        shutil.copy2(bin_dir / src, dest / name)
        set_runpath_origin(dest / name)
    if libs:
        for lib in sorted(bin_dir.glob("lib*.so*")):
            if lib.is_symlink():
                (dest / lib.name).symlink_to(os.readlink(lib))
            else:
                shutil.copy2(lib, dest / lib.name)
                set_runpath_origin(dest / lib.name)
    return dest
