"""The CLI reference (docs/cli.md) is generated from the code and must be current; every command's help is
complete: a description and at least one example that runs that very command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click
import pytest

from llamalab.cli import cli

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_cli_docs.py"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _gen()
COMMANDS = [(ctx.command_path, cmd) for cmd, ctx in gen.walk(cli, click.Context(cli, info_name="llamalab"))]


def test_cli_reference_is_current():
    current = (ROOT / "docs" / "cli.md").read_text() if (ROOT / "docs" / "cli.md").is_file() else ""
    assert current == gen.render(), ("docs/cli.md is stale: run `make docs` (python scripts/gen_cli_docs.py) and "
                                     "commit it.")


def test_check_mode(tmp_path):
    out = tmp_path / "cli.md"
    assert gen.main(["--check", "-o", str(out)]) == 1
    assert gen.main(["-o", str(out)]) == 0
    assert gen.main(["--check", "-o", str(out)]) == 0


def test_every_command_is_in_the_reference():
    text = gen.render()
    for path, _ in COMMANDS:
        assert f"`{path}`" in text


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_help_is_complete(path, cmd):
    blocks = gen.help_blocks(cmd.help)
    assert blocks and blocks[0][0] == "para" and blocks[0][1].strip(), f"`{path} --help` has no description"
    if path == "llamalab":
        return  # the group's "Start here" block lists the commands
    ex = gen.examples(cmd)
    assert ex, (f"`{path} --help` has no examples: add to its docstring a \\b paragraph headed 'Examples:' "
                "with one command a line")
    assert any(f"{path}" in line for line in ex), f"no example of `{path}` runs `{path}` itself: {ex}"


def test_help_blocks():
    text = "First line\n    continues.\n\n    \b\n    Examples:\n      llamalab x --y\n\n    Tail.\f\n    hidden"
    assert gen.help_blocks(text) == [("para", "First line continues.", []),
                                     ("pre", "Examples:", ["llamalab x --y"]), ("para", "Tail.", [])]


def test_every_command_help_runs():
    from click.testing import CliRunner

    for path, _ in COMMANDS:
        args = path.split()[1:] + ["--help"]
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0, (path, res.output)
        assert "Usage:" in res.output
