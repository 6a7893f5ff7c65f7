"""ccache's part in builds: the environment, the counters, the source link (pure, and on real files)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from llamalab.llamacpp import build as buildmod
from llamalab.llamacpp import ccache

# `ccache --print-stats` of ccache 4.7.5 (Debian 12) after a build that compiled 26 files and took 3 from the cache
STATS = """cache_miss\t26
cache_size_kibibyte\t3412
direct_cache_hit\t2
direct_cache_miss\t27
preprocessed_cache_hit\t1
preprocessed_cache_miss\t26
stats_updated_timestamp\t1796227616
"""


def test_parse_stats_and_delta():
    after = ccache.parse_stats(STATS)
    assert after["cache_miss"] == 26 and after["direct_cache_hit"] == 2
    c = ccache.delta({"cache_miss": 20, "direct_cache_hit": 1}, after)
    assert (c.hits, c.misses, c.total) == (2, 6, 8)
    assert c.describe() == "ccache: 2 of 8 compiles from the cache (25%)"
    assert ccache.delta(after, after).describe() == "ccache: nothing compiled"
    assert ccache.parse_stats("no tabs here\nx\tnot a number\n") == {}


def _fake_ccache(tmp_path: Path) -> str:
    d = tmp_path / "bin"
    d.mkdir()
    exe = d / "ccache"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(d)


def test_env_shares_one_cache_and_sets_base_dir_to_the_tree(tmp_path):
    path = _fake_ccache(tmp_path)
    e = ccache.env(tmp_path / "tree", tmp_path / "home", {"PATH": path})
    assert e == {"CCACHE_DIR": str(tmp_path / "home" / "ccache"), "CCACHE_MAXSIZE": "5G",
                 "CCACHE_BASEDIR": str(tmp_path / "tree"), "CCACHE_NOHASHDIR": "1"}
    mine = ccache.env(tmp_path / "t", tmp_path / "h", {"PATH": path, "CCACHE_DIR": "/c", "CCACHE_MAXSIZE": "1G"})
    assert mine["CCACHE_DIR"] == "/c" and mine["CCACHE_MAXSIZE"] == "1G"
    assert ccache.env(tmp_path / "t", tmp_path / "h", {"PATH": path, "LLAMALAB_CCACHE": "0"}) == \
        {"CCACHE_DISABLE": "1"}
    assert ccache.env(tmp_path / "t", tmp_path / "h", {"PATH": str(tmp_path / "nowhere")}) == {}


def test_source_link_is_made_and_repointed(tmp_path):
    a, b, tree = tmp_path / "a", tmp_path / "b", tmp_path / "tree"
    for d in (a, b, tree):
        d.mkdir()
    link = ccache.source_link(tree, a)
    assert link == tree / ".src" and os.path.realpath(link) == str(a)
    assert ccache.source_link(tree, a) == link
    ccache.source_link(tree, b)
    assert os.path.realpath(link) == str(b)


def test_a_cache_made_for_another_source_spelling_is_dropped(tmp_path):
    cache = tmp_path / "CMakeCache.txt"
    cache.write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/old/llama.cpp\n")
    buildmod.forget_other_source(tmp_path, tmp_path / ".src")
    assert not cache.exists()
    cache.write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={tmp_path / '.src'}\n")
    buildmod.forget_other_source(tmp_path, tmp_path / ".src")
    assert cache.exists()


@pytest.mark.skipif(not ccache.program() or not __import__("shutil").which("gcc"), reason="needs ccache and gcc")
def test_two_trees_of_two_copies_of_a_source_share_objects(tmp_path, monkeypatch):
    """The point of the link: a file compiled in one tree is a cache hit in another tree whose source is a copy
    elsewhere (another version's or a bisect clone's unchanged file)."""
    monkeypatch.delenv("CCACHE_DIR", raising=False)  # this test's own cache, empty (tmp_path/home/ccache)
    counts = []
    for name in ("one", "two"):
        src, tree = tmp_path / f"src-{name}", tmp_path / name / "build"
        src.mkdir()
        tree.mkdir(parents=True)
        (src / "f.c").write_text('#include <stdio.h>\nint f(void) { return printf("%s", __FILE__); }\n')
        link = ccache.source_link(tree, src)
        env = {**os.environ, **ccache.env(tree, tmp_path / "home")}
        before = ccache.stats(env)
        subprocess.run(["ccache", "gcc", "-O2", "-c", str(link / "f.c"), "-o", "f.o"], cwd=tree, env=env, check=True)
        counts.append(ccache.delta(before, ccache.stats(env)))
    assert (counts[0].misses, counts[1].hits) == (1, 1)
