"""`-sm tensor`: llama.cpp prints the buffers of its Meta() device (which spans several devices) as one figure
each; `split_meta` attributes them to the devices it spans. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .patterns import ENDPOINT_DESC
from .records import KINDS, Buffers, KvSummary, Ledger

EXACT_ON_EVERY_DEVICE = ("compute", "output", "input")  # one allocation of the printed size on every device


def member_name(name: str, desc: str | None) -> str:
    """A Meta device member as its buffers are named: rpc devices print as `RPC0 (host:port)` in the device list
    but their buffers as `RPC0[host:port]`."""
    if desc and name.startswith("RPC") and "[" not in name and ENDPOINT_DESC.match(desc.strip()):
        return f"{name}[{desc.strip()}]"
    return name


def is_meta(name: str) -> bool:
    return name.startswith("Meta(")


def _shares(n: int, tensor_split: Sequence[float] | None) -> tuple[list[float], str]:
    """Each device's share of a split tensor: `-ts` where given (llama.cpp reads the first n values; missing ones
    are 0), else equal (llama.cpp's default when -ts is absent or all zero)."""
    ts = [max(0.0, float(x)) for x in (tensor_split or [])][:n]
    ts += [0.0] * (n - len(ts))
    total = sum(ts)
    if total <= 0:
        return [1.0 / n] * n, "equal"
    return [x / total for x in ts], "-ts"


def split_meta(led: Ledger, members: Sequence[str], tensor_split: Sequence[float] | None = None) -> None:
    """Attribute the buffers of a Meta() device (`-sm tensor`) to the devices it spans, in place.

    What llama.cpp prints (ggml-backend-meta.cpp, b11312): a Meta buffer's size is the LARGEST of its per-device
    buffers, and its name is `Meta()` (the device list is lost to a moved-from vector), so the members come from
    the `creating a Meta device … - device i: NAME` lines. Per kind:
    - compute, output, input: allocated with the same size on every device — exact.
    - KV cache / recurrent state: split by heads in the proportion of -ts (equal without it); the cache's summary
      line (`size = X MiB`) is the whole unsplit cache, so the device with the largest share holds the printed
      figure and the others share the rest — exact in total, an estimate per device past two devices.
    - model: split tensors follow -ts, but norms and other small tensors are mirrored on every device; the log
      has no total, so each device is charged printed × its share / the largest share — exact for the largest,
      an estimate (upper bound) for the others.
    Not in the log at all: the meta backend's temporary reduction buffers and the communication library's own
    memory (NCCL/RCCL), which the driver check shows as unaccounted."""
    metas = [n for n in led.devices if is_meta(n)]
    if not metas:
        return
    record: dict[str, Any] = {"printed": {}, "devices": [], "shares": [], "shares_from": None, "kv_total_mib": None,
                              "exact": [], "estimated": [], "attributed": False, "note": ""}
    led.meta = record
    for name in metas:
        b = led.devices[name]
        record["printed"][name] = {f"{k}_mib": getattr(b, f"{k}_mib") for k in KINDS}
    inner = [p.strip() for p in metas[0][5:-1].split(",") if p.strip()] if metas[0].endswith(")") else []
    devs = list(inner or members)
    record["devices"] = devs
    if not devs:
        record["note"] = ("the log names no member devices (no \"creating a Meta device\" lines): the Meta() buffers "
                          "stay as one device")
        return
    shares, source = _shares(len(devs), tensor_split)
    record["shares"], record["shares_from"] = [round(x, 4) for x in shares], source
    top = max(range(len(devs)), key=lambda i: shares[i])
    printed = Buffers()
    for name in metas:
        _add_buffers(printed, led.devices.pop(name))
    per: dict[str, Buffers] = {d: Buffers() for d in devs}
    exact: list[str] = []
    estimated: list[str] = []
    for k in KINDS:
        v = getattr(printed, f"{k}_mib")
        if v is not None:
            total = _cache_total(led, metas, k) if k in ("kv", "rs") else None
            how = _attribute_kind(per, k, v, total, shares, top)
            if how == "split" and k == "kv" and total is not None:
                record["kv_total_mib"] = round(total, 2)
            (exact if how == "exact" or (how == "split" and len(devs) == 2) or (how == "share" and len(devs) == 1)
             else estimated).append(k)
    for d, b in per.items():
        _add_buffers(led.devices.setdefault(d, Buffers()), b)
    for cache in (*led.kv_caches, *led.rs_caches):
        _split_cache_buffers(cache, metas, devs, shares, top)
    record["exact"], record["estimated"], record["attributed"] = exact, estimated, True
    record["note"] = meta_note(record)


def _add_buffers(target: Buffers, b: Buffers) -> None:
    for k in KINDS:
        v = getattr(b, f"{k}_mib")
        if v is not None:
            target.add(k, v)


def _attribute_kind(per: dict[str, Buffers], kind: str, printed: float, total: float | None, shares: list[float],
                    top: int) -> str:
    """One kind of the Meta() buffers' printed MiB attributed to the devices in `per` (in order), by split_meta's
    rules; how: `exact` (the same on every device), `split` (the cache's whole size known: the top share holds the
    printed part, the others share the rest) or `share` (printed × share / the top share)."""
    devs = list(per)
    if kind in EXACT_ON_EVERY_DEVICE:
        for d in devs:
            per[d].add(kind, printed)
        return "exact"
    if total is not None and total + 0.01 >= printed and len(devs) > 1:
        rest_share = sum(shares[i] for i in range(len(devs)) if i != top)
        for i, d in enumerate(devs):
            got = printed if i == top else (total - printed) * (shares[i] / rest_share if rest_share else 0.0)
            per[d].add(kind, round(got, 2))
        return "split"
    for i, d in enumerate(devs):
        per[d].add(kind, round(printed * shares[i] / shares[top], 2))
    return "share"


def _cache_total(led: Ledger, metas: list[str], kind: str) -> float | None:
    """The whole (unsplit) size of the caches held by the Meta() buffers, from their summary lines."""
    caches = led.kv_caches if kind == "kv" else led.rs_caches
    sizes = [c.size_mib for c in caches if c.size_mib is not None and any(m in c.buffers for m in metas)]
    return round(sum(sizes), 2) if sizes else None


def _split_cache_buffers(cache: KvSummary, metas: list[str], devs: list[str], shares: list[float], top: int) -> None:
    """A cache summary's Meta() buffer replaced by its devices' parts (so KV bytes per token are per device)."""
    printed = sum(cache.buffers.pop(m) for m in metas if m in cache.buffers) if any(m in cache.buffers for m in metas) \
        else None
    if printed is None:
        return
    total = cache.size_mib if cache.size_mib is not None and cache.size_mib + 0.01 >= printed else None
    rest_share = sum(s for i, s in enumerate(shares) if i != top)
    for i, d in enumerate(devs):
        if total is not None and len(devs) > 1:
            got = printed if i == top else (total - printed) * (shares[i] / rest_share if rest_share else 0.0)
        else:
            got = printed * shares[i] / shares[top]
        cache.buffers[d] = round(cache.buffers.get(d, 0.0) + got, 2)


def meta_note(record: dict[str, Any] | None) -> str:
    """One sentence on how a -sm tensor ledger's per-device figures were made, and what the log cannot tell."""
    if not record:
        return ""
    if not record.get("attributed"):
        return record.get("note") or ""
    devs = ", ".join(record["devices"])
    how = ("equal shares (no -ts)" if record.get("shares_from") == "equal" else
           "the -ts shares " + ":".join(f"{s:g}" for s in record.get("shares") or []))
    exact = ", ".join(record.get("exact") or []) or "none"
    est = ", ".join(record.get("estimated") or []) or "none"
    return (f"-sm tensor: llama.cpp prints each Meta() buffer once, as its largest per-device part; attributed to "
            f"{devs} by {how}. Exact per device: {exact} (compute and output are allocated at the printed size on "
            f"every device; the KV cache's summary gives its whole size). Estimated: {est} (weights: mirrored tensors "
            "are not in the log, so other devices are charged by their share). Not in the log: the meta backend's "
            "reduction buffers and NCCL/RCCL's own memory — the driver check shows them as unaccounted.")

