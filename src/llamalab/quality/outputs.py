"""Whether a configuration computes what its baseline computes, pure: generated tokens and their top candidates
compared position by position, llama-perplexity's KL divergence of the logits, and a verdict in plain words.

What is compared (run/references.py makes it, on every configuration's own server; quality/logits.py runs the
KLD): a few fixed prompts, greedy decoding, a fixed number of output tokens with the top candidates and their
log-probabilities at every position, once single-stream and, where the study serves K requests, once with K at
once. The baseline's own generation is made twice under the same conditions (A/A): batched requests in llama.cpp
are not bit-invariant, so where the baseline parts with itself, an arm is judged against that spread, not against
zero.

The verdict (`judge`):
- **same outputs**: every sequence identical (or, where the baseline is not deterministic, parting no earlier than
  it parts with itself) and the logits' KLD 0.000000 with 100% the same top token (or within numerics: at most
  `KLD_NOISE` and `SAME_TOP_MIN` % on a real model);
- **parts at a near tie**: a sequence parts where the baseline's two best candidates were within `NEAR_TIE` of each
  other (the numerics of another kernel or order of work can flip such a choice), the logits agreeing;
- **computes differently**: a sequence parts where the baseline's choice was clear, or the logits disagree.
A synthetic model's random weights make KLD magnitudes and margins meaningless, but identity is still exact: on a
synthetic model anything but identical tokens and KLD 0.000000 with 100% the same top token is "computes
differently", a difference to explain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NEAR_TIE = 0.01  # probability points between the baseline's two best candidates: a flip closer than this is numerics
KLD_ZERO = 5e-7  # llama-perplexity prints 6 decimals: 0.000000 is below this
KLD_NOISE = 1e-4  # mean KLD (nats) a real model's logits may differ by from numerics alone
SAME_TOP_MIN = 99.0  # % of positions with the same most likely token, from numerics alone
MODES = ("single", "parallel")

SAME, NEAR, DIFFERS, NOT_COMPARED = "same", "near-tie", "differs", "not-compared"


@dataclass(frozen=True)
class Generated:
    """One generated sequence: the prompt it continues (its index among the reference prompts), its tokens, their
    text pieces, and at every position the top candidates (token id, log-probability), most likely first."""

    prompt: int
    tokens: tuple[int, ...]
    pieces: tuple[str, ...] = ()
    top: tuple[tuple[tuple[int, float], ...], ...] = ()

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> Generated:
        return cls(prompt=int(d.get("prompt") or 0), tokens=tuple(int(t) for t in d.get("tokens") or ()),
                   pieces=tuple(str(p) for p in d.get("pieces") or ()),
                   top=tuple(tuple((int(i), float(lp)) for i, lp in pos) for pos in d.get("top") or ()))

    def as_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "tokens": list(self.tokens), "pieces": list(self.pieces),
                "top": [[[i, lp] for i, lp in pos] for pos in self.top]}

    def margin(self, pos: int) -> float | None:
        """The probability of the best candidate less the second best's at `pos` (None where fewer than two are
        known)."""
        if pos >= len(self.top) or len(self.top[pos]) < 2:
            return None
        ps = sorted((math.exp(lp) for _, lp in self.top[pos]), reverse=True)
        return ps[0] - ps[1]


def first_difference(a: Sequence[int] | Sequence[str], b: Sequence[int] | Sequence[str]) -> int | None:
    """The first position (0-based) where two token (or text piece) sequences differ, or where one ends; None where
    identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Parting:
    """Where an arm's sequence first parts with the baseline's: the sequence, the position (0-based), the baseline's
    margin there and the two continuations from that position."""

    seq: int
    pos: int
    margin: float | None
    base: tuple[str, ...]
    arm: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "token": self.pos + 1, "margin": self.margin, "base": list(self.base),
                "arm": list(self.arm)}


@dataclass(frozen=True)
class ModeResult:
    """One mode (single-stream, or K at once) of an arm against the baseline: sequences identical, n of N, and
    where the first parts (the earliest position over the sequences)."""

    mode: str
    identical: int
    total: int
    parting: Parting | None
    by: str = "tokens"  # "pieces": compared by the tokens' text (a side without token ids)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "identical": self.identical, "total": self.total,
                "parting": self.parting.as_dict() if self.parting else None,
                **({"by": self.by} if self.by != "tokens" else {})}


def compare(base: Sequence[Generated], arm: Sequence[Generated], mode: str, context: int = 8) -> ModeResult:
    """Each arm sequence against the baseline's sequence of the same place, token by token — by the tokens' text
    pieces where either side has no token ids (ik_llama.cpp's server gives none: run/references.py); `context`
    tokens of each continuation kept from where they part."""
    identical, first = 0, None
    by = "tokens"
    for i, (b, a) in enumerate(zip(base, arm)):
        if b.tokens and a.tokens:
            pos = first_difference(b.tokens, a.tokens)
        else:
            by = "pieces"
            pos = first_difference(b.pieces, a.pieces)
        if pos is None:
            identical += 1
            continue
        if first is None or pos < first.pos:
            first = Parting(seq=i, pos=pos, margin=b.margin(pos), base=_pieces(b, pos, context),
                            arm=_pieces(a, pos, context))
    return ModeResult(mode=mode, identical=identical, total=min(len(base), len(arm)), parting=first, by=by)


def _pieces(g: Generated, pos: int, n: int) -> tuple[str, ...]:
    if g.pieces:
        return g.pieces[pos:pos + n]
    return tuple(f"<{t}>" for t in g.tokens[pos:pos + n])


@dataclass(frozen=True)
class Verdict:
    kind: str  # SAME | NEAR | DIFFERS | NOT_COMPARED
    words: str
    baseline: str
    modes: tuple[ModeResult, ...] = ()
    aa: tuple[ModeResult, ...] = ()  # the baseline against itself, per mode
    kld: Mapping[str, Any] | None = None
    synthetic: bool = False

    @property
    def recommendable(self) -> bool:
        """Whether the arm may be recommended on the ground of its outputs (never where it computes differently)."""
        return self.kind != DIFFERS

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "words": self.words, "baseline": self.baseline,
                "modes": [m.as_dict() for m in self.modes], "aa": [m.as_dict() for m in self.aa],
                "kld": dict(self.kld) if self.kld is not None else None, "synthetic": self.synthetic}


def not_compared(baseline: str, why: str) -> Verdict:
    return Verdict(kind=NOT_COMPARED, words=f"outputs not compared ({why})", baseline=baseline)


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.1f}%" if x >= 0.001 else f"{100 * x:.2g}%"


def kld_words(kld: Mapping[str, Any] | None) -> str:
    """"KLD 0.000000, same top 100.0%" ("" where none); a KLD that rounds to zero is written 0.000000."""
    if not kld or kld.get("mean") is None:
        return ""
    mean, top = float(kld["mean"]), kld.get("same_top_pct")
    return (f"KLD {0.0 if abs(mean) <= KLD_ZERO else mean:.6f}"
            + (f", same top {float(top):.1f}%" if top is not None else ""))


def logits_same(kld: Mapping[str, Any] | None, synthetic: bool) -> bool | None:
    """Whether the logits agree: KLD 0.000000 and 100% the same top token; on a real model within numerics
    (`KLD_NOISE`, `SAME_TOP_MIN`). None where they were not compared."""
    if not kld or kld.get("mean") is None:
        return None
    mean, top = float(kld["mean"]), kld.get("same_top_pct")
    if mean <= KLD_ZERO and (top is None or float(top) >= 100.0 - 1e-9):
        return True
    if synthetic:
        return False
    return mean <= KLD_NOISE and (top is None or float(top) >= SAME_TOP_MIN)


@dataclass
class _Partings:
    """Each mode's comparison, the baseline's A/A per mode, and the partings sorted by what they tell."""

    modes: list[ModeResult]
    aa: list[ModeResult]
    clear: list[ModeResult]  # parts where the baseline's choice was clear
    near: list[ModeResult]  # parts at a near tie
    spread: list[tuple[ModeResult, ModeResult]]  # parts no earlier than the baseline parts with itself
    batched: list[ModeResult]  # a synthetic model's K requests at once part, its single stream and logits agreeing


def _partings(base: Mapping[str, Sequence[Sequence[Generated]]], arm: Mapping[str, Sequence[Generated]],
              synthetic: bool) -> _Partings:
    out = _Partings([], [], [], [], [], [])
    for mode in MODES:
        reps, mine = base.get(mode) or [], arm.get(mode)
        if not reps or mine is None:
            continue
        r = compare(reps[0], mine, mode)
        out.modes.append(r)
        aa = compare(reps[0], reps[1], mode) if len(reps) > 1 else None
        if aa is not None:
            out.aa.append(aa)
        if r.parting is None:
            continue
        if aa is not None and aa.parting is not None and r.parting.pos >= aa.parting.pos:
            out.spread.append((r, aa))
        elif not synthetic and (r.parting.margin is None or r.parting.margin < NEAR_TIE):
            out.near.append(r)  # a margin llama-server did not give is no evidence of a clear choice
        elif synthetic and mode == "parallel":
            out.batched.append(r)  # judged with the single stream and the logits, below
        else:
            out.clear.append(r)
    return out


def _earliest(rs: Sequence[ModeResult]) -> Parting:
    first = min((r for r in rs if r.parting is not None), key=lambda r: r.parting.pos if r.parting else 0)
    assert first.parting is not None
    return first.parting


def _where(rs: Sequence[ModeResult], synthetic: bool) -> str:
    r = min(rs, key=lambda x: x.parting.pos if x.parting else 0)
    p = _earliest([r])
    return (f"token {p.pos + 1}" + ("" if synthetic else f", margin {_pct(p.margin)}")
            + ("" if r.mode == "single" else f", {r.mode}"))


def judge(baseline: str, base: Mapping[str, Sequence[Sequence[Generated]]], arm: Mapping[str, Sequence[Generated]],
          kld: Mapping[str, Any] | None, *, synthetic: bool, kld_error: str | None = None) -> Verdict:
    """An arm's verdict against its baseline. `base`: per mode, the baseline's repetitions (the first is the
    reference, a second its A/A); `arm`: per mode, the arm's sequences; `kld`: llama-perplexity's statistics of the
    arm's logits against the baseline's (None where not run; `kld_error`: why, where a run failed — the words say
    it, so a failed comparison never reads as one that was not asked for)."""
    p = _partings(base, arm, synthetic)
    if not p.modes and kld is None:
        return not_compared(baseline, "no reference generation of both")

    def verdict(kind: str, words: str) -> Verdict:
        return Verdict(kind=kind, words=words, baseline=baseline, modes=tuple(p.modes), aa=tuple(p.aa), kld=kld,
                       synthetic=synthetic)

    logits = kld_words(kld)
    said = logits or (f"logits not compared: {kld_error}" if kld_error else "")  # a difference says either
    single = [m for m in p.modes if m.mode == "single"]
    if p.batched and not (single and all(m.parting is None for m in single)):
        p.clear.extend(p.batched)  # without an identical single stream, a batched parting is a difference too
        p.batched.clear()
    if p.clear or logits_same(kld, synthetic) is False:
        bits = [_where(p.clear, synthetic)] if p.clear else []
        bits += [said] if said else []
        tail = " — a synthetic model: any difference is one to explain" if synthetic else ""
        return verdict(DIFFERS, f"computes differently ({'; '.join(bits)}){tail}")
    if p.near:
        first = _earliest(p.near)
        return verdict(NEAR, f"parts at a near tie (token {first.pos + 1}, margin {_pct(first.margin)}"
                       + (f"; {said}" if said else "") + ")")
    notes = [f"{r.mode}: the baseline parts with itself from token {aa.parting.pos + 1 if aa.parting else '?'}, "
             "and this no earlier" for r, aa in p.spread]
    if p.batched:  # a synthetic model's single stream and logits agree: its K-at-once tokens tell nothing more
        notes.append(f"at K requests at once it parts at token {_earliest(p.batched).pos + 1}, as batched requests "
                     "may (they are not bit-invariant, and a synthetic model's flat distributions flip on any "
                     "rounding); single-stream identical")
    notes += [logits] if logits else []
    if not p.modes:
        notes.append("logits only")
    elif kld is None:
        notes.append("tokens only: logits not compared" + (f" ({kld_error})" if kld_error else ""))
    return verdict(SAME, "same outputs" + (f" ({'; '.join(notes)})" if notes else ""))


def by_mode(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, list[Generated]]]:
    """Stored reference rows (mode, rep, result with `sequences`) → mode → rep → sequences."""
    out: dict[str, dict[int, list[Generated]]] = {}
    for r in rows:
        seqs = [Generated.of(s) for s in ((r.get("result") or {}).get("sequences") or [])]
        out.setdefault(str(r["mode"]), {})[int(r["rep"])] = seqs
    return out


def repetitions(gens: Mapping[str, Mapping[int, list[Generated]]]) -> dict[str, list[list[Generated]]]:
    """mode → rep → sequences (`by_mode`) as `judge`'s `base`: per mode, every repetition in order (pure)."""
    return {mode: [by[k] for k in sorted(by)] for mode, by in gens.items()}


def first_repetition(gens: Mapping[str, Mapping[int, list[Generated]]]) -> dict[str, list[Generated]]:
    """mode → rep → sequences (`by_mode`) as `judge`'s `arm`: per mode, its first repetition (pure)."""
    return {mode: by[min(by)] for mode, by in gens.items() if by}
