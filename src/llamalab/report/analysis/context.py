"""Context per configuration: the n_ctx llama.cpp's fit chose, and — next to each measured difference from the
baseline build — the difference predicted from the compute buffers it frees and the KV bytes one token costs.
Pure: takes a stored RunData.

Prediction: a build that frees ΔC_i MiB of compute buffer on device i lets the fit give that memory to the KV
cache, which costs b_i bytes per token on device i (from the baseline's KV lines). Every device must hold its
share of each new token, so the tightest device decides: Δtokens = min_i ΔC_i / b_i (memory.context_tokens_for).
The prediction is exact only if --fit filled the same memory in both builds and compute buffers did not depend on
the context. Neither holds: the candidate's own compute buffer grows with the context it gains (the KQ mask is
n_ctx × n_ubatch per copy), so the difference measured at the two fitted contexts understates what the candidate
frees at the baseline's context; and fit decides from its own projected buffers, stepping the context by 256.
Measured: the prediction came out 23–25 % below the measured gain in every configuration of the CPU-RPC demo and of
the H200 run (e.g. +15,398 vs +19,968 tokens on the demo, +4,465 vs +5,888 on the H200). The comparison is shown,
not hidden.
"""

from __future__ import annotations

from ...fit import maxctx
from ...logs import memory
from .. import records
from ..data import RunData, compute_by_label, device_labels, device_names
from .verdict import study_builds, study_settings


def _kv_by_label(ledger: dict) -> dict[str, float]:
    names = device_names(ledger)
    per = ledger.get("kv_bytes_per_token") or {}
    return {lab: per[n] for lab, n in zip(device_labels(names), names) if per.get(n)}


def _budgets(config: dict) -> list[int] | None:
    return records.emulation(config).get("budgets_mib")


def config_of(data: RunData, build: str, setting: str) -> dict | None:
    """The last configuration of build × setting that loaded and has a ledger (None: none did)."""
    for c in reversed(data.configs):
        if c["build"] == build and c["setting"] == setting and c["status"] == "ok" and c.get("ledger"):
            return c
    return None


def _over_budget(ledger: dict, budgets: list[int] | None) -> list[str]:
    """Devices (labels) whose allocated model + KV + compute + output exceed their emulated budget — the fit could
    not meet it (e.g. `-sm none` puts the whole model on one device) and the server loaded anyway on the larger
    real device; on the emulated rig it would not load."""
    if not budgets:
        return []
    names = device_names(ledger)
    labels = device_labels(names)
    if len(budgets) == 1:
        budgets = budgets * len(names)
    out = []
    for lab, n, b in zip(labels, names, budgets):
        buf = ledger["devices"][n]
        total = sum(buf.get(k) or 0.0 for k in ("model_mib", "kv_mib", "rs_mib", "compute_mib", "output_mib"))
        if total > b:
            out.append(f"{lab} {total:,.0f} > {b:,} MiB")
    return out


def predicted_delta_tokens(base: dict, cand: dict) -> int | None:
    """Tokens of context the candidate's compute-buffer difference from the baseline is worth (negative: it costs)."""
    bc, cc = compute_by_label(base), compute_by_label(cand)
    if set(bc) != set(cc):
        return None  # another device set (e.g. -sm none puts everything on one device): no like-for-like figure
    kv = _kv_by_label(base)
    freed = {d: b - c for d, b in bc.items() if b is not None and (c := cc.get(d)) is not None}
    if not freed or not kv:
        return None
    if all(v >= 0 for v in freed.values()):
        return memory.context_tokens_for(freed, kv)
    if all(v <= 0 for v in freed.values()):
        t = memory.context_tokens_for({d: -v for d, v in freed.items()}, kv)
        return None if t is None else -t
    return None  # frees memory on one device and takes it on another: no single figure


def _checks(data: RunData) -> dict[tuple[str, str], dict]:
    return {(r["build"], r["setting"]): r for r in data.tables.get("context_checks", [])}


def _budget_fits(data: RunData) -> dict[tuple[str, str], dict]:
    """(build, setting) → the stored search for the context within every budget (`fit.budgetfit`), with
    `verified` (the verifying load's verdict, None where none was made)."""
    out = {}
    for r in data.tables.get("budget_fits", []):
        doc = r.get("result")
        if isinstance(doc, dict):
            out[(r["build"], r["setting"])] = {**doc, "verified": None if r.get("verified") is None
                                               else bool(r["verified"])}
    return out


WITHIN_NOTE = ("Context within budgets: the largest context (a multiple of 256) that keeps every device within its "
               "budget, found by llama.cpp's own dry runs at fixed contexts where its fit did not keep to the budgets "
               "(it shrinks the context for the total memory and, with -ngl given, stops before placing layers per "
               "device); the decision table and the advice credit that figure.")


def searched(data: RunData) -> bool:
    """Whether the run searched for any configuration's context within the budgets."""
    return bool(data.tables.get("budget_fits"))


def credited(fitted: int | None, over: list[str], fit: dict | None, searched_setting: bool) -> tuple[int | None, str]:
    """The context a configuration is credited with, and why it is unknown where it is (""): the largest within
    every budget where that was searched for; llama.cpp's fitted context where nothing was over budget and no
    configuration of the setting needed the search; otherwise unknown."""
    if fit is not None:
        lim = fit.get("budget") or {}
        ver = fit.get("verify") or {}
        if lim.get("n_ctx") and ver and not ver.get("loaded"):  # a real load said otherwise: it decides
            if ver.get("n_ctx_loaded_within"):
                return int(ver["n_ctx_loaded_within"]), ""
            return None, (f"the dry runs put it at {lim['n_ctx']:,} tokens, but loaded for real that went over a "
                          f"budget ({ver.get('reason') or 'not loaded'}) and no lower context was confirmed")
        if lim.get("n_ctx"):
            return int(lim["n_ctx"]), ""
        if lim.get("error"):
            return None, f"the dry runs that search for it failed: {lim['error']}"
        if lim.get("over_mib") is not None:
            return None, (f"it does not load within the budgets at any context ({lim.get('worst') or 'a device'} is "
                          f"{lim['over_mib']:,.1f} MiB over at {lim.get('over_at') or 256:,} tokens)")
        return None, "the search for it gave no figure"
    if over:
        return None, (f"llama.cpp's fit left it over budget, {' and '.join(over)}, and this run holds no search for "
                      "its context within the budgets: runs made before llamalab searched for it do not, so run the "
                      "study again")
    if searched_setting:
        return None, ("the other configurations' contexts within the budgets were searched for and this one's "
                      "was not")
    return fitted, ""


def _first_probe_reason(chk: dict | None) -> str | None:
    """Why the verifying reload did not count as loaded: the server did not start, or it started and its buffers
    went over a budget (then it did load, just not within what the emulated cards hold)."""
    steps = (chk or {}).get("steps")
    if not isinstance(steps, list) or not steps or not isinstance(steps[0], dict) or steps[0].get("loaded"):
        return None
    return steps[0].get("reason") or None


def rows(data: RunData) -> list[dict]:
    """One row per build × setting with a stored ledger: fitted context, and predicted vs measured difference
    from the setting's baseline (the study's first build with a ledger)."""
    out = []
    checks = _checks(data)
    fits = _budget_fits(data)
    for setting in study_settings(data):
        cfgs = {b: c for b in study_builds(data) if (c := config_of(data, b, setting))}
        builds = [b for b in study_builds(data) if b in cfgs]
        if not builds:
            continue
        base_cfg = cfgs[builds[0]]
        base = base_cfg["ledger"]
        searched = any(k[1] == setting for k in fits)
        base_ctx, _ = credited(base.get("n_ctx"), _over_budget(base, _budgets(base_cfg)),
                               fits.get((builds[0], setting)), searched)
        for b in builds:
            cfg = cfgs[b]
            led = cfg["ledger"]
            fitted = led.get("n_ctx")
            budgets = _budgets(cfg)
            over = _over_budget(led, budgets)
            fit = fits.get((b, setting))
            ctx, unknown = credited(fitted, over, fit, searched)
            measured = None if ctx is None or base_ctx is None else ctx - base_ctx
            predicted = 0 if b == builds[0] else predicted_delta_tokens(base, led)
            train = data.n_ctx_train(led)
            capped = False
            base_for_cap = base_ctx if base_ctx is not None else base.get("n_ctx")
            if predicted and predicted > 0 and train and base_for_cap is not None:
                room = max(0, train - base_for_cap)  # no build gives more context than the model was trained for
                capped, predicted = predicted > room, min(predicted, room)
            fit_ = led.get("fit") or {}
            out.append({
                "build": b, "setting": setting, "baseline": builds[0],
                "fitted_n_ctx": fitted,  # llama.cpp's fit: the context the server ran with
                # the context credited to it: within every budget where llama.cpp's fit did not keep to them
                "n_ctx": ctx,
                "context_unknown": unknown,  # why n_ctx is None
                "budget_n_ctx": ((fit or {}).get("budget") or {}).get("n_ctx"),
                "margin_n_ctx": ((fit or {}).get("margin") or {}).get("n_ctx"),
                "budget_fit": fit,  # the search (fit/budgetfit.py), None where none ran
                "budget_verified": (fit or {}).get("verified"),
                "n_ctx_train": train,
                "at_model_limit": bool(train and ctx and ctx >= train),
                "fit_reduced_from": led.get("fit_ctx_from") or fit_.get("ctx_from"),
                "fit_status": led.get("fit_status"),  # llama.cpp's own word: "ok", "failed", or None (no fit ran)
                "budgets_mib": budgets,
                "over_budget": over,  # devices whose allocated buffers exceed their budget: would not load there
                "kv_bytes_per_token": round(sum(_kv_by_label(led).values()), 1) or None,
                "predicted_delta_tokens": predicted,
                "predicted_capped_at_model_limit": capped,
                "measured_delta_tokens": measured,
                "prediction_error_tokens": None if predicted is None or measured is None else measured - predicted,
                "verified": None if (chk := checks.get((b, setting))) is None else bool(chk["verified"]),
                "max_loaded_n_ctx": chk["max_loaded_n_ctx"] if chk and chk["mode"] == "search" else None,
                "verify_reason": _first_probe_reason(chk),
            })
    return out


def limit_text(r: dict) -> str:
    """" (the model's limit, n_ctx_train 131,072)" for a context at the model's training context, else ""."""
    return f" (the model's limit, n_ctx_train {r['n_ctx_train']:,})" if r.get("at_model_limit") else ""


def _fit_text(r: dict) -> str:
    """What the context figure of a row is, where it is not llama.cpp's fitted one."""
    if r.get("budget_fit") is None:
        return ""
    fit = r["budget_fit"]
    if fit.get("engine"):  # an engine without a fit ran at llamalab's search (setup/configplan.engine_context)
        return (f" within every budget ({fit['engine']} has no fit of the context: it ran at {r['fitted_n_ctx']:,}, "
                "llamalab's search within every budget less the margin)")
    return (f" within every budget (llama.cpp's fit gave {r['fitted_n_ctx']:,}; within every budget less its margin: "
            f"{maxctx.within_text(fit.get('margin') or {})})")


def sentences(data: RunData) -> list[str]:
    """The context sentences of a report: each build's context against its setting's baseline, what the baselines
    themselves say (over budget, at the model's limit), llama.cpp's failed fits, and the verifying loads."""
    all_rows = rows(data)
    out = _delta_sentences(all_rows)
    out += _baseline_sentences(all_rows)
    out += _fit_failed_sentences(all_rows)
    out += _verify_sentences(all_rows)
    out += _within_verify_sentences(all_rows)
    return out


def _delta_sentences(all_rows: list[dict]) -> list[str]:
    """Per build other than its setting's baseline: the context it holds against the baseline's, and the
    prediction from its compute buffers (or why the difference is unknown)."""
    out = []
    for r in all_rows:
        if r["build"] == r["baseline"]:
            continue
        base_row = next((x for x in all_rows if x["build"] == r["baseline"] and x["setting"] == r["setting"]), {})
        if r["measured_delta_tokens"] is None:
            why = r["context_unknown"] or base_row.get("context_unknown")
            if why:
                who = r["build"] if r["context_unknown"] else r["baseline"]
                out.append(f"{r['setting']}: {r['build']}'s context against {r['baseline']} is unknown — {who}'s "
                           f"context within the budgets is not known: {why}.")
            continue
        out.append(_delta_sentence(r, base_row))
    return out


def _delta_sentence(r: dict, base_row: dict) -> str:
    """One measured context difference from the baseline, with its prediction where there is one."""
    pred = r["predicted_delta_tokens"]
    base_ctx = r["n_ctx"] - r["measured_delta_tokens"]
    pct = f" ({100 * r['measured_delta_tokens'] / base_ctx:+.0f}%)" if base_ctx else ""
    s = (f"{r['setting']}: {r['build']} holds {r['n_ctx']:,} tokens{limit_text(r)}{_fit_text(r)} vs "
         f"{base_ctx:,} for {r['baseline']}{limit_text(base_row)}{_fit_text(base_row)}: "
         f"{r['measured_delta_tokens']:+,} tokens{pct}")
    if r["over_budget"] and r.get("budget_fit") is not None:
        s += (f" — at llama.cpp's fitted context it is over budget ({'; '.join(r['over_budget'])}), which would "
              "not load on such cards")
    if pred is not None:
        s += f"; predicted from its compute buffers and KV bytes per token: {pred:+,}"
        if r["predicted_capped_at_model_limit"]:
            s += " (capped at the model's limit)"
    return s + "."


def _baseline_sentences(all_rows: list[dict]) -> list[str]:
    """What the baselines say by themselves: over budget at llama.cpp's fitted context, or already at the model's
    whole context."""
    out = []
    for r in all_rows:
        if r["build"] == r["baseline"] and r["over_budget"] and r.get("budget_fit") is not None:
            out.append(f"{r['setting']}: {r['build']} at llama.cpp's fitted context ({r['fitted_n_ctx']:,} tokens) is "
                       f"over budget ({'; '.join(r['over_budget'])}): it holds {r['n_ctx'] or 0:,} within every "
                       "budget." if r["n_ctx"] else
                       f"{r['setting']}: {r['build']} is over budget ({'; '.join(r['over_budget'])}) and "
                       f"{r['context_unknown']}.")
    at_limit = [r for r in all_rows if r["build"] == r["baseline"] and r.get("at_model_limit")]
    for r in at_limit:
        out.append(f"{r['setting']}: {r['baseline']} already runs the model's whole context ({r['n_ctx']:,} "
                   "tokens = n_ctx_train): no build can give more context here, whatever memory it frees.")
    return out


def _fit_failed_sentences(all_rows: list[dict]) -> list[str]:
    """One sentence where llama.cpp's memory fit reported failure in any configuration (none where it did not)."""
    failed = [r for r in all_rows if r.get("fit_status") == "failed"]
    if not failed:
        return []
    return [f"llama.cpp's memory fit reported failure in {len(failed)} of {len(all_rows)} configuration(s) "
            "(\"failed to fit params to free device memory\"): where it reduced the context it had done so "
            "for the total memory, then stopped before placing layers per device (it does not move layers "
            "when -ngl is given); each fitted context is the one it reduced to"
            + ("; the contexts above are llamalab's search for the largest within every device's budget "
               "(dry runs at fixed contexts, llama.cpp's own figures)" if any(r.get("budget_fit") for r in all_rows)
               else ", and the per-device budget check above is llamalab's") + "."]


def _verify_sentences(all_rows: list[dict]) -> list[str]:
    """Per configuration whose fitted context was loaded again with fit off: whether it loaded (within the
    budgets), and the largest context that did."""
    out = []
    for r in all_rows:
        if r["verified"] is None:
            continue
        why = r.get("verify_reason") or ""
        if r["verified"]:
            verdict = "loads again with fit off"
        elif why.startswith("over budget"):
            verdict = f"loads again with fit off but NOT within the budgets ({why})"
        else:
            verdict = "did NOT load again with fit off" + (f" ({why})" if why else "")
        s = f"{r['setting']}: {r['build']}'s fitted context of {r['fitted_n_ctx']:,} tokens {verdict}"
        if r["max_loaded_n_ctx"]:
            s += (f"; the largest that loads{' within the budgets' if r['budgets_mib'] else ''} is "
                  f"{r['max_loaded_n_ctx']:,} (fit keeps a safety margin)")
        out.append(s + ".")
    return out


def _within_verify_sentences(all_rows: list[dict]) -> list[str]:
    """Per configuration whose context within the budgets (found by dry runs) was loaded for real: whether it
    loaded within every budget, and the lower context used where it did not."""
    out = []
    for r in all_rows:
        step = (r.get("budget_fit") or {}).get("verify")
        if not step:
            continue
        mib = ", ".join(f"{v:,.1f}" for v in (step.get("device_mib") or {}).values())
        s = (f"{r['setting']}: {r['build']}'s context within the budgets by dry runs, {step['n_ctx']:,} tokens, "
             + ("loads for real within every budget" if step.get("loaded") else
                f"did NOT load within the budgets ({step.get('reason') or 'not loaded'})")
             + (f" (MiB per device: {mib})" if mib else ""))
        low = step.get("n_ctx_loaded_within")
        if not step.get("loaded"):
            s += (f"; {low:,} tokens does, and is the figure used" if low else
                  "; no lower context was confirmed, so its context within the budgets is unknown")
        out.append(s + ".")
    return out
