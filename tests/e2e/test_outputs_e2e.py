"""The output check for real on the CPU demo rig (two local rpc-servers, the pinned llama.cpp, the tiny synthetic
model): a difference planted as a build — a q4_0 V cache where the baseline runs f16, which holds more context —
is caught ("computes differently") and never recommended, while the no-op override, which only turns pipeline
parallelism off, computes the same (identical tokens single-stream, KLD 0.000000 and 100% the same top token on its
own build, flags and devices). The baseline's generation is made twice (its A/A). Prints the check's seconds per
configuration against its trials' seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llamalab.quality import outputs as q
from llamalab.report import data as rdata
from llamalab.report.analysis import outputs, recommend
from llamalab.store.db import Store

pytestmark = [pytest.mark.llama]

BUILDS = ('builds=[{name="copies4"},{name="no-pp-override",args=["-ot","no_such_tensor=CPU"]},'
          '{name="planted-v-q4_0",label="a q4_0 V cache planted as a build",args=["-ctv","q4_0"]}]')


def test_a_planted_difference_is_caught_and_the_noop_override_computes_the_same(tmp_path):
    env = {**os.environ, "LLAMALAB_DATA": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "llamalab.cli", "run", "demo", "--json", "--set", BUILDS,
                           "--set", 'settings=[{name="default"}]', "--set", "workload.repeats=2"],
                          env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    with Store(tmp_path / "data" / "results.db", readonly=True) as s:
        run_id = s.run()["id"]
        stored = s.outputs(run_id)
        logits = {r["build"]: r["result"] for r in s.output_logits(run_id)}
        data = rdata.load(s, run_id)
    # what was stored: every configuration single-stream and at 4 requests at once, the baseline twice (its A/A)
    have = {(r["build"], r["mode"], r["rep"]) for r in stored}
    assert have == {(b, m, 1) for b in ("copies4", "no-pp-override", "planted-v-q4_0") for m in q.MODES} | \
        {("copies4", m, 2) for m in q.MODES}
    assert all(len(r["result"]["sequences"]) == (1 if r["mode"] == "single" else 4) for r in stored)
    assert all(len(s_["tokens"]) == 16 and len(s_["top"]) == 16 for r in stored for s_ in r["result"]["sequences"])
    assert all(s_["top"][0] for r in stored if r["mode"] == "single" for s_ in r["result"]["sequences"])
    # the logits: each on its own build with its own flags (the server-only ones left out, and said)
    assert "-ctv" in logits["planted-v-q4_0"]["argv"] and "q4_0" in logits["planted-v-q4_0"]["argv"]
    assert "-ot" in logits["no-pp-override"]["argv"] and any(d.startswith("-np") for d in logits["copies4"]["dropped"])
    v = outputs.verdicts(data)
    assert v[("no-pp-override", "default")].kind == q.SAME, v[("no-pp-override", "default")].words
    assert v[("copies4", "default")].words.startswith("baseline; against itself (A/A): deterministic single-stream")
    plant = v[("planted-v-q4_0", "default")]
    assert plant.kind == q.DIFFERS and plant.kld and plant.kld["same_top_pct"] < 99.0, plant.words
    assert all(r.build != "planted-v-q4_0" and "planted-v-q4_0" not in r.alternatives
               for r in recommend.decision_table(data))
    cells = {r["build"]: r["outputs"] for r in rows}
    assert cells["copies4"].startswith("baseline") and cells["no-pp-override"] == "same"
    assert cells["planted-v-q4_0"].startswith("differs (token ")
    # what the check added, per configuration, against its trials
    trials = {}
    for t in data.trials:
        trials[t["build"]] = trials.get(t["build"], 0.0) + float(t["wall_s"] or 0.0)
    gen = {}
    for r in stored:
        gen[r["build"]] = gen.get(r["build"], 0.0) + float(r["result"].get("seconds") or 0.0)
    for b in trials:
        print(f"\n{b}: trials {trials[b]:.1f} s; reference generation {gen.get(b, 0.0):.1f} s; logits "
              f"{float(logits[b].get('seconds') or 0.0):.1f} s", file=sys.stderr)
