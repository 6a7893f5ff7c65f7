"""`llamalab bisect`'s pure parts: the search over a fake metric, figures from dry runs, diff links, the output."""

from pathlib import Path

import pytest

from llamalab.logs import dryrun
from llamalab.plan import bisect, plan
from llamalab.plan.bisect import Step
from llamalab.setup import configplan


def commits(n):
    return [f"{i:040x}" for i in range(n)]


def measurer(values, fail=()):
    """A fake metric: commit index → figure; `fail` indexes cannot be built. Records what was measured."""
    seen = []

    def measure(c):
        i = int(c, 16)
        seen.append(i)
        if i in fail:
            return Step(commit=c, ok=False, reason="build failed: test")
        return Step(commit=c, value=values(i))
    return measure, seen


@pytest.mark.parametrize("n,change", [(2, 1), (3, 1), (3, 2), (5, 3), (17, 1), (17, 16), (100, 37), (1000, 999)])
def test_search_finds_the_first_changed_commit_in_log2_steps(n, change):
    measure, seen = measurer(lambda i: 100.0 if i < change else 132.5)
    out = bisect.search(commits(n), measure)
    assert out.first == commits(n)[change] and out.parent == commits(n)[change - 1]
    assert (out.before, out.after) == (100.0, 132.5) and out.untested == []
    import math
    assert len(seen) <= 2 + math.ceil(math.log2(max(n - 1, 1))) and len(set(seen)) == len(seen)


def test_search_follows_the_first_change_away_from_good_not_the_last():
    """Two changes (100 → 120 at 4, → 150 at 9): the first commit that differs from GOOD is found."""
    measure, _ = measurer(lambda i: 100.0 if i < 4 else (120.0 if i < 9 else 150.0))
    out = bisect.search(commits(12), measure)
    assert out.first == commits(12)[4] and out.after == 120.0


def test_search_with_the_same_figure_at_both_ends_measures_only_the_ends():
    measure, seen = measurer(lambda i: 64.0)
    out = bisect.search(commits(50), measure)
    assert out.first is None and sorted(seen) == [0, 49] and out.before == out.after == 64.0


def test_figures_within_the_printed_precision_are_the_same():
    measure, _ = measurer(lambda i: 100.0 if i < 3 else 100.004)
    assert bisect.search(commits(6), measure).first is None
    measure, _ = measurer(lambda i: 100.0 if i < 3 else 100.01)
    assert bisect.search(commits(6), measure).first == commits(6)[3]


def test_a_figure_that_appears_or_disappears_is_a_change():
    measure, _ = measurer(lambda i: None if i < 2 else 3.0)  # e.g. `sched copies` printed from commit 2 on
    assert bisect.search(commits(5), measure, "copies").first == commits(5)[2]


def test_commits_that_cannot_be_built_are_skipped_and_listed_when_next_to_the_change():
    def values(i):
        return 10.0 if i < 6 else 20.0

    measure, seen = measurer(values, fail={3, 4, 7})
    out = bisect.search(commits(10), measure)
    assert out.first == commits(10)[6] and out.untested == [] and 5 in seen
    measure, _ = measurer(values, fail={4, 5})
    out = bisect.search(commits(10), measure)
    assert out.first == commits(10)[6] and out.untested == [commits(10)[4], commits(10)[5]]


def test_an_end_that_cannot_be_measured_stops_the_bisect():
    measure, _ = measurer(lambda i: 1.0, fail={0})
    with pytest.raises(bisect.BisectError, match="GOOD .* could not be measured"):
        bisect.search(commits(4), measure)
    measure, _ = measurer(lambda i: 1.0, fail={3})
    with pytest.raises(bisect.BisectError, match="BAD"):
        bisect.search(commits(4), measure)
    with pytest.raises(bisect.BisectError, match="same commit"):
        bisect.search(commits(1), measure)


def _cp(**kw):
    cp = configplan.ConfigPlan(build="b", setting="s", status="ok")
    for k, v in kw.items():
        setattr(cp, k, v)
    return cp


def test_metric_values_sum_the_devices_and_the_host():
    cp = _cp(devices=[dryrun.DeviceFigures("RPC0", model_mib=10.5, context_mib=4.0, compute_mib=20.25),
                      dryrun.DeviceFigures("RPC1", model_mib=9.5, context_mib=4.0, compute_mib=30.0)],
             host=dryrun.DeviceFigures("Host", model_mib=1.0, compute_mib=2.5), n_ctx=4096, sched_copies=4,
             graph_splits=3)
    assert bisect.metric_value(cp, "compute_mib") == 52.75
    assert bisect.metric_value(cp, "kv_mib") == 8.0
    assert bisect.metric_value(cp, "model_mib") == 21.0
    assert bisect.metric_value(cp, "used_mib") == 81.75
    assert (bisect.metric_value(cp, "n_ctx"), bisect.metric_value(cp, "copies"),
            bisect.metric_value(cp, "graph_splits")) == (4096, 4, 3)
    assert bisect.per_device(cp, "compute_mib") == {"RPC0": 20.25, "RPC1": 30.0, "Host": 2.5}
    assert bisect.per_device(cp, "n_ctx") == {}
    assert bisect.metric_value(_cp(), "compute_mib") is None


def test_the_metric_choices_of_the_cli_are_the_metrics():
    from llamalab.cli.plan import bisect as cmd

    opt = next(p for p in cmd.params if p.name == "metric")
    assert list(opt.type.choices) == list(bisect.METRICS)


@pytest.mark.parametrize("url,slug", [
    ("https://github.com/ggml-org/llama.cpp.git", "ggml-org/llama.cpp"),
    ("https://github.com/ggml-org/llama.cpp", "ggml-org/llama.cpp"),
    ("https://user:tok@github.com/ggml-org/llama.cpp/", "ggml-org/llama.cpp"),
    ("git@github.com:ggml-org/llama.cpp.git", "ggml-org/llama.cpp"),
    ("ssh://git@github.com/me/llama.cpp", "me/llama.cpp"),
    ("https://gitlab.com/me/llama.cpp.git", None),
    ("https://github.com.evil.example/me/x", None),
    ("/srv/git/llama.cpp", None),
])
def test_github_remotes(url, slug):
    assert bisect.github_slug(url) == slug


def test_diff_links():
    sha, parent = "a" * 40, "b" * 40
    assert bisect.diff_link("git@github.com:ggml-org/llama.cpp.git", Path("/r"), sha, parent) == (
        f"https://github.com/ggml-org/llama.cpp/commit/{sha} "
        f"(compare: https://github.com/ggml-org/llama.cpp/compare/{parent}...{sha})")
    assert bisect.diff_link(None, Path("/r"), sha, parent) == f"git -C /r show {sha}"
    assert bisect.diff_link("/srv/git/llama.cpp", Path("/r"), sha, None) == f"git -C /r show {sha}"


def test_render_names_the_commit_the_change_and_the_time():
    cs = commits(5)
    measure, _ = measurer(lambda i: 100.0 if i < 3 else 120.5)
    out = bisect.search(cs, measure)
    out.seconds, out.link = 321.0, f"git -C /r show {cs[3]}"
    for s in out.steps:
        s.build_seconds, s.dry_run_seconds = 100.0, 5.0
    text = bisect.render(out, Path("/r"))
    assert f"first commit that changes compute_mib: {cs[3]}" in text
    assert "compute_mib: 100 → 120.50" in text and f"diff: git -C /r show {cs[3]}" in text
    assert f"bisect took 321 s: {len(out.steps)} commits measured, builds {100 * len(out.steps)} s" in text
    same, _ = measurer(lambda i: 7.0)
    assert "no commit between them changes it" in bisect.render(bisect.search(cs, same), Path("/r"))


def test_pick_config(tmp_path):
    from llamalab.core.errors import ConfigError
    from llamalab.study import spec as study

    st, _ = study.load("demo")
    assert bisect.pick_config(st, None, None).id == "copies4|kv-f16-q8_0"
    assert bisect.pick_config(st, "copies1", "kv-f16-f16").id == "copies1|kv-f16-f16"
    with pytest.raises(ConfigError, match="no configuration"):
        bisect.pick_config(st, "nope", None)


def _git_repo(path, n):
    import os
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True, env=env)
    for i in range(n):
        (path / "f").write_text(str(i))
        subprocess.run(["git", "add", "f"], cwd=path, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", f"commit {i}"], cwd=path, check=True, env=env)
    out = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=path, check=True, capture_output=True,
                         text=True, env=env).stdout.split()
    return out, env


def test_commit_line_goes_from_good_to_bad_on_first_parents(tmp_path):
    import subprocess

    shas, env = _git_repo(tmp_path / "r", 6)
    repo = tmp_path / "r"
    assert bisect.commit_line(repo, shas[1], "main") == shas[1:]
    assert bisect.commit_line(repo, "HEAD~2", "HEAD") == shas[3:]
    with pytest.raises(bisect.BisectError, match="not an ancestor"):
        bisect.commit_line(repo, shas[4], shas[2])
    from llamalab.core.errors import SourceError
    with pytest.raises(SourceError, match="is not a commit"):
        bisect.commit_line(repo, "no-such-tag", "main")
    assert bisect.subject_of(repo, shas[2]) == "commit 2"
    assert bisect.remote_url(repo) is None
    subprocess.run(["git", "remote", "add", "origin", "git@github.com:me/llama.cpp.git"], cwd=repo, check=True)
    assert bisect.remote_url(repo) == "git@github.com:me/llama.cpp.git"


def test_the_tree_checks_commits_out_in_its_own_clone_and_leaves_the_repo_alone(tmp_path):
    shas, env = _git_repo(tmp_path / "r", 3)
    repo = tmp_path / "r"
    (repo / "untracked").write_text("mine")
    tree = bisect.Tree(repo=repo, home=tmp_path / "home", backend="cpu-rpc", options={}, targets=("llama-server",))
    tree.checkout(shas[0])
    assert (tree.src / "f").read_text() == "0"
    (tree.src / "stray").write_text("x")
    before = (tree.src / "f").stat().st_mtime_ns
    tree.checkout(shas[0])  # the same commit again: the file is not rewritten, strays are cleaned
    assert (tree.src / "f").stat().st_mtime_ns == before and not (tree.src / "stray").exists()
    tree.checkout(shas[2])
    assert (tree.src / "f").read_text() == "2"
    assert (repo / "f").read_text() == "2" and (repo / "untracked").read_text() == "mine"
    import subprocess
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == \
        "?? untracked\n"
    assert subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout.count("\n") == 1


def test_the_command_refuses_what_is_not_a_checkout_before_building_anything(tmp_path, monkeypatch, capsys):
    """The CLI end to end up to the first git call: a folder that is not a repository, and GOOD after BAD."""
    from llamalab.cli import entry

    monkeypatch.setenv("LLAMALAB_HOME", str(tmp_path / "home"))
    assert entry(["bisect", "a", "b", "--repo", str(tmp_path)]) == 1
    assert "is not a git repository" in capsys.readouterr().err
    shas, _ = _git_repo(tmp_path / "r", 3)
    assert entry(["bisect", shas[2], shas[0], "--repo", str(tmp_path / "r")]) == 1
    assert "is not an ancestor of BAD" in capsys.readouterr().err
    assert entry(["bisect", shas[0], shas[2], "--repo", str(tmp_path / "r"), "--build", "nope"]) == 2
    assert "no configuration nope" in capsys.readouterr().err
    assert not (tmp_path / "home" / "bisect").exists()
