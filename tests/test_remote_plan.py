"""Plans of remote models against llama.cpp's real dry runs (issue 25): Gemma 3 270M served whole and split into 3
parts by the build's llama-gguf-split, through a local Hugging Face Hub and ollama registry (tests/hubserver.py):
every plan figure equal to the same plan of the local file, under 2% of the file fetched; the repository table of
6 quants in under a minute and 30 MB; tune's stage one from a header alone."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import hubserver
from hubserver import MICRO, Hub
from llamalab import cli
from llamalab.models import packaged
from llamalab.models import synthetic as models
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod

pytestmark = [pytest.mark.llama, pytest.mark.usefixtures("loopback")]

ONE_BUILD = ['builds=[{name="copies4"}]']


@pytest.fixture(scope="module")
def built(llama_home):
    """The pinned build (its llama-gguf-split too), made or reused."""
    st, _ = studymod.load("demo", ONE_BUILD)
    return session.prepare(st, RunOptions(home=llama_home), Progress()).artifacts["copies4"]


@pytest.fixture(scope="module")
def gemma_split(built, gemma, tmp_path_factory) -> list[Path]:
    """Gemma cut into 3 parts by llama.cpp's own llama-gguf-split (80 tensors a part)."""
    out = tmp_path_factory.mktemp("split")
    subprocess.run([str(built.binary("llama-gguf-split")), "--split", "--split-max-tensors", "80", str(gemma),
                    str(out / "gemma-3-270m-Q4_K_M")], check=True, capture_output=True, env={**os.environ,
                                                                                              **built.env()})
    parts = sorted(out.glob("*.gguf"))
    assert [p.name for p in parts] == [f"gemma-3-270m-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return parts


@pytest.fixture
def hub(gemma, gemma_split, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    salt = uuid.uuid4().hex  # this test's content is new to the stand-in cache
    with Hub() as h:
        files = {"gemma-3-270m-Q4_K_M.gguf": gemma, **{f"split/{p.name}": p for p in gemma_split}}
        h.add_repo("llamalab/gemma-3-270m-GGUF", files, salt=salt,
                   sha256={"gemma-3-270m-Q4_K_M.gguf": packaged.GEMMA3_270M.sha256})
        h.add_ollama("gemma3", "270m", gemma, salt=salt)
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("LLAMALAB_OLLAMA_REGISTRY", h.registry)
        yield h


@pytest.fixture(autouse=True)
def own_stand_ins(llama_home, tmp_path):
    """The stand-ins this test's hubs made in the shared cache ($LLAMALAB_HOME/remote, beside the builds) go with
    it, and only those: another session's suite on this machine may be planning on its own stand-ins there at the
    same moment (told apart by the hub origins their source.json names), and the sha256 marks of files downloaded
    into this test's folder."""
    root = llama_home / "remote"
    first = len(hubserver.STARTED)
    yield
    origins = tuple(hubserver.STARTED[first:])
    if not origins or not root.is_dir():
        return
    for folder in root.iterdir():
        try:
            doc = json.loads((folder / "source.json").read_text())
        except (OSError, ValueError):
            continue
        if any(str(p.get("url", "")).startswith(origins) for p in doc.get("parts", [])):
            (root / f".{folder.name}.lock").unlink(missing_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
    for mark in (root / "verified").glob("*") if (root / "verified").is_dir() else ():
        if mark.read_text(errors="replace").startswith(str(tmp_path.resolve())):
            mark.unlink(missing_ok=True)


def plan_json(capsys, *args: str) -> dict:
    code = cli.entry(["plan", "demo", *[x for s in ONE_BUILD for x in ("--set", s)], "--json", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def figures(plan: dict) -> list:
    """Every figure of a plan that is about the model and the rig (not where the file lies, nor timings)."""
    keep = ("build", "setting", "status", "reason", "n_ctx", "n_ctx_train", "ctx_reduced_from", "fit_ok",
            "fit_message", "pipeline_parallel", "sched_copies", "graph_splits", "devices", "host", "host_buffers",
            "budgets_mib", "margins_mib", "fit_targets_mib", "over_budget", "n_ubatch", "n_embd", "dry_runs")
    out = []
    for c in plan["configs"]:
        c = {k: c[k] for k in keep}
        for d in c["devices"]:
            d.pop("description")  # the rpc-servers' ports
            d.pop("free_mib"), d.pop("total_mib")  # what this machine has free at that moment
        out.append(c)
    return out + [plan["copies_costs"], {k: v for k, v in plan["model"].items()
                                        if k not in ("path", "fingerprint", "size_bytes")}]


def differences(got: list, want: list) -> list[str]:
    """Each figure that differs, as `entry.key: got != want` (the first 8): what a failing comparison prints."""
    out = [f"entries: {len(got)} != {len(want)}"] if len(got) != len(want) else []
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if not (isinstance(g, dict) and isinstance(w, dict)):
            out += [f"[{i}]: {g!r} != {w!r}"] if g != w else []
            continue
        for k in sorted(set(g) | set(w), key=str):
            if g.get(k) != w.get(k):
                out.append(f"[{i}].{k}: {g.get(k)!r} != {w.get(k)!r}")
    return out[:8]


# One setting, the demo's quantized V cache: what is compared is where the model's bytes come from, and every dry run
# of the plan (with the within-budget search, 11 a configuration) is the same for either setting (110 dry runs in
# 60 s with both).
ONE_SETTING = ["--set", 'settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]']


def test_gemma_from_hf_ollama_and_a_split_plans_as_the_local_files(hub, gemma, gemma_split, llama_home, capsys):
    local = figures(plan_json(capsys, "--model", str(gemma), *ONE_SETTING))
    size = gemma.stat().st_size
    said = []
    assert all(c["status"] == "ok" and c["n_ctx"] for c in local[:-2])
    for ref in ("hf://llamalab/gemma-3-270m-GGUF/gemma-3-270m-Q4_K_M.gguf", "ollama://gemma3:270m"):
        before = hub.fetched()
        remote = plan_json(capsys, "--model", ref, *ONE_SETTING)
        fetched = hub.fetched() - before
        assert remote["model_standin"], ref
        assert figures(remote) == local, f"{ref}: {differences(figures(remote), local)}"
        assert 0 < fetched < 0.02 * size, f"{ref}: {fetched:,} bytes of {size:,} ({100 * fetched / size:.2f}%)"
        said.append(f"{ref}: {fetched:,} of {size:,} bytes fetched ({100 * fetched / size:.2f}%)")
    # the split model: named by any part, read part by part, planned as the local split (and as the whole file)
    before = hub.fetched()
    split = plan_json(capsys, "--model", "hf://llamalab/gemma-3-270m-GGUF/split/gemma-3-270m-Q4_K_M-00002-of-00003.gguf",
                      *ONE_SETTING)
    fetched = hub.fetched() - before
    local_split = figures(plan_json(capsys, "--model", str(gemma_split[0]), *ONE_SETTING))
    assert figures(split) == local_split, differences(figures(split), local_split)
    assert [c["n_ctx"] for c in local_split[:-2]] == [c["n_ctx"] for c in local[:-2]]
    assert 0 < fetched < 0.02 * size, fetched
    said.append(f"split into 3: {fetched:,} of {size:,} bytes fetched ({100 * fetched / size:.2f}%)")
    with capsys.disabled():
        print("\n" + "\n".join(said))


def test_repository_table_agrees_with_single_plans(hub, gemma, llama_home, capsys, tmp_path):
    """The table's two Gemma rows (whole and split) under 600 MiB budgets (the demo's 300 MiB do not hold the tied
    output layer on the last device): the fitted contexts are those of the single plans (llama.cpp's default, and
    with -ot no_such_tensor=CPU)."""
    budget = ["--budget", "600MiB,600MiB"]
    code = cli.entry(["plan", "demo", "--model", "hf://llamalab/gemma-3-270m-GGUF", "--context", "2048", "--json",
                      *budget])
    out = capsys.readouterr()
    assert code == 0, out.err
    table = json.loads(out.out)
    assert len(table["rows"]) == 2 and {len(r["files"]) for r in table["rows"]} == {1, 3}
    default = figures(plan_json(capsys, "--model", str(gemma), "--set", 'settings=[{name="default"}]', *budget))[0]
    no_pp = figures(plan_json(capsys, "--model", str(gemma), "--set", 'settings=[{name="default"}]', *budget,
                              "--set", 'builds=[{name="copies4", args=["-ot", "no_such_tensor=CPU"]}]'))[0]
    for r in table["rows"]:
        assert r["status"] == "ok" and r["fits"] is True and r["quant"] == "Q4_K_M"
        assert r["n_ctx"] == default["n_ctx"] and r["n_ctx_no_pp"] == no_pp["n_ctx"]
        assert r["need_mib"] and len(r["need_mib"]) == 2
    assert r["need_fits"] is True  # 2,048 tokens fit: fewer than the fitted context
    md = cli.entry(["plan", "demo", "--model", "hf://llamalab/gemma-3-270m-GGUF", "--markdown", *budget])
    text = capsys.readouterr().out
    assert md == 0 and "| Quant | File | Size | Fits |" in text and "(+2 parts)" in text


SIX = [("f16", "F16"), ("q8_0", "Q8_0"), ("q6_k", "Q6_K"), ("q5_k", "Q5_K_M"), ("q4_k", "Q4_K_M"), ("q3_k", "Q3_K_M")]


@pytest.mark.timed
def test_six_quants_of_an_8b_model_in_one_table_under_a_minute(llama_home, tmp_path, monkeypatch, built):
    """Issue 25's target: `llamalab plan --model hf://OWNER/REPO` over 6 quants of one model (header-only GGUFs of
    the 8B shape, 151,936-token vocabulary, from models.synthetic' writer: F16 to Q3_K), under 60 s on the 2-core
    machine and under 30 MB fetched in all."""
    repo = tmp_path / "repo"
    files = {}
    for wtype, label in SIX:
        shape = dataclasses.replace(models.preset("8b"), name=f"8b-{wtype}", wtype=wtype)
        files[f"Synth-8B-{label}.gguf"] = models.write_synthetic(shape, repo / f"Synth-8B-{label}.gguf", data=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with Hub() as hub:
        hub.add_repo("llamalab/Synth-8B-GGUF", files, salt=uuid.uuid4().hex)
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_TELEMETRY": "1"}
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "llamalab.cli", "plan", "--model", "hf://llamalab/Synth-8B-GGUF",
                               "--budget", "8GiB,6GiB", "--context", "32768", "--json"], env=env,
                              capture_output=True, text=True, timeout=300)
        seconds = time.monotonic() - t0
        fetched = hub.fetched()
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    print(f"6 quants: {seconds:.1f} s, {fetched / 2**20:.1f} MiB fetched for {table['size_bytes'] / 2**30:.1f} GiB")
    for r in table["rows"]:
        print(r["quant"], r["fits"], r["n_ctx"], r["n_ctx_no_pp"], r["need_mib"])
    assert [r["quant"] for r in table["rows"]] == [q for _, q in SIX]
    assert seconds < 60 and fetched < 30e6 and table["fetched_bytes"] == fetched
    by = {r["quant"]: r for r in table["rows"]}
    assert by["F16"]["fits"] is False and by["Q4_K_M"]["fits"] is True
    ctx = [by[q]["n_ctx"] for q in ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M")]
    assert ctx == sorted(ctx) and all(ctx)  # fewer bits, more context
    assert all(by[q]["n_ctx_no_pp"] >= by[q]["n_ctx"] for q in ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M"))
    need = [sum(by[q]["need_mib"]) for _, q in SIX]
    assert need == sorted(need, reverse=True)


def test_tune_from_a_header_runs_stage_one_and_says_stage_two_needs_the_weights(llama_home, tmp_path, monkeypatch,
                                                                              capsys):
    header = models.synthetic(models.preset("tiny"), llama_home, data=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("LLAMALAB_DATA", str(tmp_path / "data"))
    with Hub() as hub:
        hub.add_repo("llamalab/Tiny-GGUF", {"tiny-F16.gguf": header}, salt=uuid.uuid4().hex)  # its own stand-in
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        code = cli.entry(["tune", "tune-demo", "--model", "hf://llamalab/Tiny-GGUF:F16", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["stage2"] is None and doc["stage1"]["dry_runs"] > 2 and doc["chosen"]
    assert any(c["status"] == "front" for c in doc["candidates"]) and doc["default"]["n_ctx"]
    assert "stage two runs the front for real and needs the model's weights" in out.err and "--download" in out.err
    assert cli.entry(["runs", "--json"]) == 0 and json.loads(capsys.readouterr().out) == []  # nothing ran or stored


def test_run_downloads_a_remote_model_and_measures_it(llama_home, tmp_path, monkeypatch, capsys):
    """`run --model hf://… --download`: the weights into Hugging Face's cache (checked against the published
    sha256), then a real run on them; the same reference without --download stops before anything starts."""
    micro = models.write_synthetic(MICRO, tmp_path / "Micro-F16.gguf")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("LLAMALAB_DATA", str(tmp_path / "data"))
    small = ['builds=[{name="copies4"}]', 'settings=[{name="f16", args=["-ctk", "f16"]}]', "workload.repeats=1",
             "workload.warmup=0", "workload.concurrency=[1]", "workload.prompt_tokens=64", "workload.output_tokens=8"]
    with Hub() as hub:
        hub.add_repo("llamalab/Micro-GGUF", {"Micro-F16.gguf": micro})
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        args = ["run", "demo", "--model", "hf://llamalab/Micro-GGUF/Micro-F16.gguf", "--json",
                *[x for s in small for x in ("--set", s)]]
        assert cli.entry(args) == 2 and "--download" in capsys.readouterr().err and hub.log == []
        code = cli.entry([*args, "--download"])
        out = capsys.readouterr()
        sent = hub.fetched()
    assert code == 0, out.err
    rows = json.loads(out.out)
    assert rows and all(r["output_tps"] for r in rows)
    assert sent == micro.stat().st_size  # the whole file, once
    cached = list((tmp_path / "hf" / "hub").rglob("Micro-F16.gguf"))
    assert cached and cached[0].read_bytes() == micro.read_bytes()
