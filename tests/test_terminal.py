"""Text from logs, study files, models and imported runs reaches the terminal, Markdown and HTML as written: never as
rich markup (`[devices]`, `[/]`), never as terminal control sequences. Real stored runs, real rich consoles."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import runfixtures
from llamalab.cli import study as cli_study
from llamalab.core.safetext import markup, one_line, plain
from llamalab.report import data as rdata
from llamalab.report import html, markdown
from llamalab.report.analysis import summary
from llamalab.setup import progress
from llamalab.store.db import Store

OSC_TITLE = "\x1b]0;pwned\x07"  # sets the terminal's window title
OSC_LINK = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # a hyperlink, ST-terminated
CLEAR = "\x1b[2J\x1b[H"  # clears the screen
RESET = "\x1bc"
HOSTILE = f"{OSC_TITLE}[bold]label[/] {CLEAR}\r{OSC_LINK}{RESET}\u202egnp.exe\x9b31m\x08"


def test_plain_strips_every_control_sequence_and_keeps_text():
    assert plain(HOSTILE) == "[bold]label[/] clickgnp.exe"
    assert plain("\x1b[31mred\x1b[0m, a\ttab\nand a line, ×2 → ü") == "red, a\ttab\nand a line, ×2 → ü"
    assert plain("\x1bP1;2|secret\x1b\\after") == "after"
    assert plain(None) == "" and plain(12.5) == "12.5"
    assert one_line("a\nb\tc\x1b[1m") == "a b c"
    assert all(ord(c) >= 32 or c in "\t\n" for c in plain("".join(map(chr, range(0, 0xA0)))))


def test_plain_is_linear_on_long_hostile_input():
    import time

    t0 = time.perf_counter()
    plain("\x1b]" + "x" * 2_000_000)  # an OSC that never ends
    plain("\x1b[" + "1;" * 1_000_000)  # a CSI that never ends
    assert time.perf_counter() - t0 < 2.0


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, color_system="truecolor", width=200), buf


@pytest.mark.parametrize("text", ["set [devices] vram to your cards' free memory", "-ctk [/] failed", "[bold",
                                  "[red]x[/red] [link=http://x]y[/link] :smile:", HOSTILE])
def test_rich_progress_shows_any_text_as_written(text):
    con, buf = _console()
    p = progress.RichProgress(console=con)
    p.message(text)
    p.warn(text)
    p.build(text, 1, 2)
    p.trial(1, 2, text)
    p.close()
    out = buf.getvalue()
    assert plain(text).split("\n")[0][:20] in plain(out)
    assert not [x for x in ("pwned", "evil.example", "\x1b[2J", "\x1bc", "\u202e", "\x9b") if x in out]


def test_markup_escapes_for_rich():
    con, buf = _console()
    con.print(markup("[devices] vram, [/] and [bold]x[/bold]"))
    assert "[devices] vram, [/] and [bold]x[/bold]" in plain(buf.getvalue())


def test_stderr_progress_strips_control_sequences(capsys):
    p = progress.StderrProgress()
    p.message(HOSTILE)
    p.warn("[/]" + CLEAR)
    err = capsys.readouterr().err
    assert "[bold]label[/] clickgnp.exe" in err and "warning: [/]" in err and "\x1b" not in err


def hostile_run(tmp_path, name: str = runfixtures.DEMO) -> rdata.RunData:
    """The real run with control sequences and markup where a model file, a study file and a log put text."""
    d = runfixtures.doc(name)
    t = d["tables"]
    run = t["runs"][0]
    run["model_json"]["name"] = f"{OSC_TITLE}gemma {CLEAR}[/]"
    run["study_toml"] = run["study_toml"].replace('label = "Pipeline parallelism, 4 sched copies"',
                                                  f"label = {json.dumps(HOSTILE)}")
    t["configs"].append({**{k: None for k in t["configs"][0]}, "id": max(c["id"] for c in t["configs"]) + 1,
                         "run_id": run["id"], "build": "copies4", "setting": "kv-f16-q8_0", "pass": 9,
                         "status": "failed",
                         "reason": f"llama-server said: set [devices] vram [/] {OSC_LINK}\nnext line"})
    with Store(tmp_path / "hostile.db") as s:
        return rdata.load(s, runfixtures.fill(s, document=d))


def test_terminal_table_prints_reasons_and_names_as_written(tmp_path, capsys):
    data = hostile_run(tmp_path)
    cli_study._print_table(data)
    out = capsys.readouterr().out
    assert "set [devices] vram [/] click" in out  # not eaten as markup, no MarkupError
    assert "\x1b]" not in out and "pwned" not in out and "\x1b[2J" not in out


def test_markdown_has_no_control_sequences(tmp_path):
    md = markdown.render(hostile_run(tmp_path))
    assert "gemma [/]" in md and "[bold]label[/] clickgnp.exe" in md
    assert not [c for c in md if ord(c) < 32 and c not in "\n\t"] and "\x9b" not in md and "\u202e" not in md


def test_html_renders_code_spans_and_strips_control_sequences(tmp_path):
    data = hostile_run(tmp_path)
    page = html.render(data, images={})
    answer = page[page.index('<p id="answer"'):page.index("</p>", page.index('<p id="answer"'))]
    decision = page[page.index('<table id="decision"'):page.index("</table>", page.index('<table id="decision"'))]
    assert "`" not in answer and "`" not in decision  # no Markdown code span is left as backticks
    assert page[page.index("</p>", page.index('<p id="answer"')):].startswith("</p>\n<pre>llama-server -m MODEL.gguf")
    assert "\x1b" not in page and "\x07" not in page and "gemma [/]" in page
    assert html.prose("run `a <b> & c` then `d`") == "run <code>a &lt;b&gt; &amp; c</code> then <code>d</code>"
    assert html.prose("no `closing span") == "no `closing span"


def test_nvml_lines_once_per_configuration(tmp_path):
    """An interleaved run starts a server (and stores an NVML reading) per repeat: one line per GPU and
    configuration, from the last pass, whatever the number of passes."""
    d = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" / "h200" / "export.json").read_text())
    t = d["tables"]
    with Store(tmp_path / "once.db") as s:
        once = summary.fidelity_lines(rdata.load(s, runfixtures.fill(s, document=d)))
    next_id = max(c["id"] for c in t["configs"]) + 1
    t["configs"] += [{**c, "id": next_id + i, "pass": (c.get("pass") or 0) + 100} for i, c in enumerate(t["configs"])]
    with Store(tmp_path / "twice.db") as s:
        twice = summary.fidelity_lines(rdata.load(s, runfixtures.fill(s, document=d)))
    nvml = [x for x in twice if "NVML" in x]
    assert nvml and len(nvml) == len(set(nvml)) == len([x for x in once if "NVML" in x])
