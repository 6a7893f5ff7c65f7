"""The docs cannot rot: every ```toml block in docs/, README.md and the benchmarks' READMEs loads as a study, so does
every study file under benchmarks/, docs/study-files.md names every key of study/spec.py with its true default, and
every `llamalab …` command shown in those pages parses as a real command with its options and arguments."""

from __future__ import annotations

import re
import shlex
import tomllib
import typing
from pathlib import Path

import click
import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from llamalab.cli import cli
from llamalab.core.errors import LlamalabError
from llamalab.study import spec as study

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
STUDY_DOC = DOCS / "study-files.md"
# the pages a user reads: docs/, the README and each benchmark's README (cli.md is generated from the CLI itself)
PAGES = sorted([*DOCS.glob("*.md"), ROOT / "README.md", *ROOT.glob("benchmarks/*/README.md")])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks(path: Path, *langs: str) -> list[tuple[int, str]]:
    """(line number, text) of each fenced block in `path` whose language is one of `langs`."""
    text = path.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) in langs]


TOML_BLOCKS = [(p, line, text) for p in PAGES for line, text in blocks(p, "toml")]
STUDY_FILES = sorted(ROOT.glob("benchmarks/**/*.toml"))


def test_study_doc_has_toml_examples():
    assert sum(1 for p, _, _ in TOML_BLOCKS if p == STUDY_DOC) >= 2


@pytest.mark.parametrize("path, line, text", TOML_BLOCKS, ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in TOML_BLOCKS])
def test_toml_block_loads_as_a_study(path, line, text, tmp_path):
    f = tmp_path / "example.toml"
    f.write_text(text)
    try:
        st, _ = study.load(str(f))
    except LlamalabError as e:
        pytest.fail(f"{path.relative_to(ROOT)}, the ```toml block at line {line}, is not a study llamalab loads:\n{e}\n"
                    "Fix the block (Python's TOML reader is TOML 1.0: inline tables on one line), or fence a "
                    "fragment as ```text.", pytrace=False)
    assert st.builds and study.expand(st)


def test_benchmark_study_files_exist():
    assert len(STUDY_FILES) >= 3


@pytest.mark.parametrize("path", STUDY_FILES, ids=[str(p.relative_to(ROOT)) for p in STUDY_FILES])
def test_benchmark_study_file_loads(path):
    """A committed benchmark's study file is what `llamalab run FILE` reads: it must load and expand as it is."""
    st, _ = study.load(str(path))
    assert st.builds and study.expand(st)


# ---------------------------------------------------------------- every key, with its default


def _model_of(annotation) -> type[BaseModel] | None:
    """The pydantic model inside `X`, `list[X]`, `X | None`, `Annotated[X, …]`, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        m = _model_of(arg)
        if m is not None:
            return m
    return None


def _is_list(annotation) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(a) for a in typing.get_args(annotation) if typing.get_origin(a) is not None)


def study_keys(model: type[BaseModel] = study.Study, prefix: str = "") -> dict[str, object]:
    """Every key a study file can hold, spelled as the doc spells it (`builds[].cmake`), with its default."""
    out: dict[str, object] = {}
    for name, f in model.model_fields.items():
        key = f"{prefix}{name}"
        if f.default is not PydanticUndefined:
            default = f.default
        elif f.default_factory is not None:
            default = f.default_factory()
        else:
            default = PydanticUndefined
        out[key] = default
        sub = _model_of(f.annotation)
        if sub is not None:
            out.update(study_keys(sub, key + ("[]." if _is_list(f.annotation) else ".")))
    return out


def doc_rows() -> dict[str, str]:
    """Key → default cell, from the key tables of docs/study-files.md."""
    rows = {}
    for line in STUDY_DOC.read_text().splitlines():
        m = re.match(r"^\| `([\w.\[\]]+)` \| [^|]* \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_study_doc_names_every_key():
    rows = doc_rows()
    missing = [k for k in study_keys() if k not in rows]
    assert not missing, f"docs/study-files.md lacks these study keys: {missing}"
    unknown = [k for k in rows if k not in study_keys()]
    assert not unknown, f"docs/study-files.md documents keys study.py does not have: {unknown}"


def test_study_doc_defaults_are_true():
    keys = study_keys()
    checked = 0
    for key, cell in doc_rows().items():
        m = re.fullmatch(r"`([^`]+)`", cell)
        if not m:
            continue  # "required", "—", or words: not a literal to compare
        literal = tomllib.loads(f"v = {m.group(1)}")["v"]
        assert literal == keys[key], f"{key}: the doc says {m.group(1)}, study.py says {keys[key]!r}"
        checked += 1
    assert checked >= 15


# ---------------------------------------------------------------- commands shown in docs


def _commands(path: Path) -> list[tuple[int, str]]:
    out = []
    for line, text in blocks(path, "sh", "console", "bash", ""):
        text = re.sub(r"\\\n\s*", " ", text)  # join continued lines (the line numbers shift a little)
        for i, raw in enumerate(text.splitlines()):
            cmd = raw.strip().removeprefix("$ ")
            cmd = re.sub(r"\s+#.*$", "", cmd)
            for part in re.split(r"\s*(?:;|&&|\|)\s*", cmd):
                if part.startswith("llamalab "):
                    out.append((line + 1 + i, part))
    return out


DOC_COMMANDS = [(p, n, c) for p in PAGES if p.name != "cli.md" for n, c in _commands(p)]


@pytest.mark.parametrize("path, line, command", DOC_COMMANDS,
                         ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in DOC_COMMANDS])
def test_documented_command_exists(path, line, command):
    words = shlex.split(command)[1:]
    ctx = click.Context(cli, info_name="llamalab")
    cmd: click.Command = cli
    while isinstance(cmd, click.Group) and words and not words[0].startswith("-"):
        sub = cmd.get_command(ctx, words[0])
        assert sub is not None, f"{path.name}:{line}: `llamalab {words[0]}` is not a command"
        cmd, words = sub, words[1:]
        ctx = click.Context(cmd, info_name=cmd.name, parent=ctx)
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}
    for w in words:
        if w.startswith("-") and w != "-":
            assert w.split("=", 1)[0] in known, f"{path.name}:{line}: {w} is not an option of {command.split()[:2]}"
    # click's own parser: an option missing its value, or a flag given one, fails here; every required argument
    # must be given and nothing may be left over (values are not checked: paths in docs need not exist)
    try:
        values, rest, _ = cmd.make_parser(ctx).parse_args(list(words))
    except click.UsageError as e:
        pytest.fail(f"{path.name}:{line}: `{command}` does not parse: {e.format_message()}", pytrace=False)
    assert not rest, f"{path.name}:{line}: `{command}`: unexpected extra argument(s) {rest}"
    # a given argument parses to its word (or a tuple of words); a missing one to None or click's "unset" marker
    missing = [p.name for p in cmd.params if isinstance(p, click.Argument) and p.required
               and not (isinstance(values.get(p.name), str)
                        or (isinstance(values.get(p.name), tuple) and values[p.name]))]
    assert not missing, f"{path.name}:{line}: `{command}` lacks the argument(s) {missing}"


def test_no_committed_report_calls_one_trial_no_difference():
    """One trial is no verdict: no committed report, benchmark JSON or doc pairs a ratio measured once ("n=1") with
    "no measurable difference" (stats.verdict says "untested (one trial)" there)."""
    root = Path(__file__).parent.parent
    bad = re.compile(r"n=1\)[^\n\"<|]{0,80}no measurable difference")
    found = []
    for p in [*root.glob("benchmarks/**/*"), *root.glob("docs/**/*.md"), root / "README.md"]:
        if p.is_file() and p.suffix in (".md", ".html", ".json", ".txt"):
            for m in bad.finditer(p.read_text(encoding="utf-8", errors="replace")):
                found.append(f"{p.relative_to(root)}: …{m.group(0)[-120:]}")
    assert not found, found[:5]
