#!/usr/bin/env python3
"""Write docs/cli.md, the CLI reference, from the click group in `llamalab.cli`.

Every command and subcommand (found by walking the group, so new commands appear by themselves) gets its
description, usage line, arguments, options with types and defaults, and the examples from its help.
`--check` exits 1 when docs/cli.md differs from what the code says (tests/test_cli_docs.py does the same).

    python scripts/gen_cli_docs.py          # or: make docs
    python scripts/gen_cli_docs.py --check
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "cli.md"
PROG = "llamalab"
EXAMPLE_HEADS = ("examples:", "example:")


def walk(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """`cmd` and, for a group, every subcommand below it (in the group's listing order), depth first."""
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from walk(sub, click.Context(sub, info_name=name, parent=ctx))


def help_blocks(text: str | None) -> list[tuple[str, str, list[str]]]:
    """A click help text as blocks: ("para", text, []) or ("pre", heading, lines) for `\\b` paragraphs.
    Text after `\\f` is for the code's readers only, as in click."""
    text = inspect.cleandoc(text or "").split("\f", 1)[0]
    blocks: list[tuple[str, str, list[str]]] = []
    for para in _paragraphs(text):
        if para[0].strip() == "\b":
            lines = para[1:]
            head = ""
            if lines and lines[0].strip().endswith(":") and not lines[0].startswith((" ", "\t")):
                head, lines = lines[0].strip(), lines[1:]
            blocks.append(("pre", head, _dedent(lines)))
        else:
            blocks.append(("para", " ".join(ln.strip() for ln in para), []))
    return blocks


def _paragraphs(text: str) -> list[list[str]]:
    out: list[list[str]] = []
    cur: list[str] = []
    for line in text.splitlines():
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()]
    cut = min(indents) if indents else 0
    return [ln[cut:] for ln in lines]


def examples(cmd: click.Command) -> list[str]:
    """The lines of a command's `Examples:` block."""
    for kind, head, lines in help_blocks(cmd.help):
        if kind == "pre" and head.lower() in EXAMPLE_HEADS:
            return [ln for ln in lines if ln.strip()]
    return []


def command_path(ctx: click.Context) -> str:
    return ctx.command_path or PROG


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _unset(value: object) -> bool:
    """click ≥ 8.3 marks "no default" with a sentinel object rather than None."""
    return value is None or type(value).__name__ == "Sentinel"


def _default(param: click.Parameter, ctx: click.Context) -> str:
    d = param.get_default(ctx, call=False)
    if isinstance(param, click.Option) and param.is_flag and not param.count:
        if param.is_bool_flag:
            return "on" if d is True else "off"
        return ""
    if _unset(d) or d in ((), []):
        return ""
    if callable(d):
        return "(computed)"
    shown = str(d)
    home = os.path.expanduser("~")
    if home and home != "/" and home in shown:
        shown = shown.replace(home, "~")  # never write this machine's home into the reference
    return f"`{shown}`"


def _type(param: click.Parameter, ctx: click.Context) -> str:
    t = param.type
    if isinstance(t, click.Choice):
        return " \\| ".join(f"`{c}`" for c in t.choices)
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(t, click.File):
        return "file (`-` for stdin)" if "r" in t.mode else "file"
    if isinstance(t, click.Path):
        return "path"
    if isinstance(t, click.types.FloatParamType | click.FloatRange):
        return "number" + (f" ({t._describe_range()})" if isinstance(t, click.FloatRange) else "")
    if isinstance(t, click.types.IntParamType | click.IntRange):
        return "integer" + (f" ({t._describe_range()})" if isinstance(t, click.IntRange) else "")
    return t.name


def _option_names(opt: click.Option, ctx: click.Context) -> str:
    names = ", ".join(f"`{o}`" for o in [*opt.opts, *opt.secondary_opts])
    if not opt.is_flag and not opt.count:
        try:
            metavar = opt.make_metavar(ctx)  # click ≥ 8.2
        except TypeError:
            metavar = opt.make_metavar()
        names += f" `{metavar}`"
    if opt.multiple:
        names += " (repeatable)"
    return names


def render_command(cmd: click.Command, ctx: click.Context, level: int) -> list[str]:
    path = command_path(ctx)
    out = [f"{'#' * level} `{path}`", ""]
    blocks = help_blocks(cmd.help)
    for kind, head, lines in blocks:
        if kind == "para":
            out += [head, ""]
        elif head.lower() in EXAMPLE_HEADS:
            continue  # examples come last
        else:
            if head:
                out += [f"**{head.rstrip(':')}**", ""]
            out += ["```text", *lines, "```", ""]
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    out += ["Usage:", "", "```text", f"{path} {usage}".rstrip(), "```", ""]

    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    if args:
        out += ["| Argument | Type | Required | Repeats |", "|---|---|---|---|"]
        for a in args:
            out.append(f"| `{a.human_readable_name}` | {_type(a, ctx)} | {'yes' if a.required else 'no'} | "
                       f"{'yes' if a.nargs == -1 else 'no'} |")
        out.append("")
    opts = [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]
    if opts:
        out += ["| Option | Type | Default | Description |", "|---|---|---|---|"]
        for o in opts:
            out.append(f"| {_cell(_option_names(o, ctx))} | {_type(o, ctx)} | {_default(o, ctx)} | "
                       f"{_cell(o.help or '')} |")
        out.append("")

    if isinstance(cmd, click.Group):
        subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
        out += ["| Command | What it does |", "|---|---|"]
        for name, sub in subs:
            if sub is not None and not sub.hidden:
                anchor = _anchor(f"{path} {name}")
                out.append(f"| [`{name}`](#{anchor}) | {_cell(sub.get_short_help_str(limit=120))} |")
        out.append("")

    ex = examples(cmd)
    if ex:
        out += ["Examples:", "", "```sh", *ex, "```", ""]
    return out


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading `` `title` ``."""
    keep = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return keep.replace(" ", "-")


def render() -> str:
    from llamalab.cli import cli
    from llamalab.cli.app import CONTEXT

    root = click.Context(cli, info_name=PROG)
    out = [
        "# llamalab command reference",
        "",
        "<!-- Generated from the code by scripts/gen_cli_docs.py: do not edit by hand; run `make docs`. -->",
        "",
        f"Every command accepts {' / '.join(f'`{o}`' for o in CONTEXT['help_option_names'])} for its help. "
        "Paths default to `$LLAMALAB_HOME` (sources, builds, models; else `~/.cache/llamalab`) and "
        "`$LLAMALAB_DATA` (results database and run folders; else `~/.local/share/llamalab`).",
        "",
    ]
    for cmd, ctx in walk(cli, root):
        level = 2 if ctx.parent is None else min(2 + len(command_path(ctx).split()) - 1, 4)
        out += render_command(cmd, ctx, level)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale; write nothing")
    ap.add_argument("-o", "--output", type=Path, default=TARGET)
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is stale: run `make docs` (or python scripts/gen_cli_docs.py).", file=sys.stderr)
            return 1
        return 0
    from llamalab.core.write import atomic_write

    atomic_write(args.output, text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
