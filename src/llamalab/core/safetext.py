"""Text that came from somewhere else — logs, study files, model files, imported runs, the user — made safe to show
[pure].

`plain` is the one place that strips terminal control sequences: ESC sequences (CSI colours and cursor moves, OSC
titles and hyperlinks, DCS/APC strings), the other C0 controls but tab and newline (a carriage return can overwrite
what a terminal shows), DEL, C1 controls and the Unicode bidirectional overrides (which reorder what is shown).
Terminal output, Markdown and HTML pass such text through it. `markup` also escapes rich's markup (`[devices]`,
`[/]`), for text that rich would otherwise read as tags; `rich_text` gives a `rich.text.Text`, which rich never
parses.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls, the bidirectional overrides and isolates
_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC … BEL or ST (window titles, hyperlinks)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (colours, cursor moves, erase)
    r"|\x1b[ -/]*[0-~]?"  # the other ESC sequences
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    rf"|[{_CHARS}]"
)
_JSON_UNSAFE = re.compile(f"[{_CHARS}]")


def plain(text: object) -> str:
    """`text` as a string without terminal control sequences or control characters (tab and newline kept)."""
    return _CONTROL.sub("", "" if text is None else str(text))


def json_safe(text: str) -> str:
    """JSON text (as `json.dumps(..., ensure_ascii=False)` writes it) with the characters `plain` strips written as
    `\\uXXXX` escapes: the same JSON value, and nothing in it that a terminal would act on. Such characters can only
    stand inside strings, where the escape means the same character."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def one_line(text: object) -> str:
    """`plain` on one line: newlines and tabs become spaces."""
    return re.sub(r"[\t\n]+", " ", plain(text))


def markup(text: object) -> str:
    """`plain` text escaped for rich markup, so `[devices]` and `[/]` print as written."""
    from rich.markup import escape

    return escape(plain(text))


def rich_text(text: object, style: str = "") -> Text:
    """A rich Text of the `plain` text (rich never reads markup in a Text)."""
    from rich.text import Text

    return Text(plain(text), style=style)


# ---------------------------------------------------------------- Markdown

_MD_HTML = {"<": "&lt;"}  # the one character that opens HTML (a tag, a comment, an autolink)
_MD_INLINE = re.compile(r"[<`]|\]\(|!\[|\]\[")
_MD_LINK = re.compile(r"<|\]\(|!\[|\]\[")
_MD_LEAD = re.compile(r"^(?:([>\[|~])|([#]{1,6}|[-+*=])(?=\s|$)|(\d{1,9})([.)])(?=\s|$))")
_MD_CODE = re.compile(r"(`+)(?:[^`]|(?!\1)`+)*?\1(?!`)")  # a code span: N backticks … N backticks


def md_prose(text: object) -> str:
    """llamalab's own sentence or a table cell (which may hold `code spans`) written from stored names, for
    Markdown: one line, no control sequence, no HTML (`<` as `&lt;`: a name cannot open a tag or close a fold) and
    no link or image (`](`, `![` escaped); code spans as they are (Markdown shows their text as written)."""
    s, out, at = one_line(text), [], 0
    for m in _MD_CODE.finditer(s):
        out += [_MD_LINK.sub(_md_escape, s[at:m.start()]), m.group()]
        at = m.end()
    return "".join(out) + _MD_LINK.sub(_md_escape, s[at:])


def _md_escape(m: re.Match[str]) -> str:
    """One match of `_MD_INLINE`/`_MD_LINK`: `<` as its entity, another character backslashed, a pair (`](`,
    `![`) with its second character backslashed."""
    g = m.group()
    if g in _MD_HTML:
        return _MD_HTML[g]
    return "\\" + g if len(g) == 1 else g[0] + "\\" + g[1]


def md_text(text: object) -> str:
    """Text from elsewhere (a build, setting, study or file name) as Markdown that shows it as written, inline:
    one line, no control sequence, no HTML (`<` as `&lt;`), no code span, link or image (`\\``, `]\\(`, `!\\[`),
    and no block marker at its start (`#`, `>`, `-`, `1.` … escaped)."""
    s = _MD_INLINE.sub(_md_escape, one_line(text))
    return _MD_LEAD.sub(_md_lead, s, count=1)


def _md_lead(m: re.Match[str]) -> str:
    """A block marker at the start of inline text, escaped: `\\#`, `\\>`, `1\\.`."""
    if m.group(3):
        return m.group(3) + "\\" + m.group(4)
    return "\\" + (m.group(1) or m.group(2))


def md_code(text: object) -> str:
    """A Markdown code span that holds `text` as written (one line): delimited by more backticks than any run in
    it, so no backtick in it can end the span."""
    s = one_line(text)
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def md_fence(text: str) -> str:
    """The fence for a Markdown code block that holds `text`: more backticks than any run of three or more in it."""
    return "`" * max(3, max((len(r) for r in re.findall(r"`{3,}", text)), default=0) + 1)


# ---------------------------------------------------------------- shell


def shell_word(word: str) -> str:
    """One word as a shell reads it back: `shlex.quote`, or where the word holds a character a terminal would act on
    or not show (a newline, an escape, a bidi override …) the ANSI-C form `$'…'` (bash, zsh, ksh, busybox) with
    those characters as `\\xHH`, `\\uHHHH` or `\\UHHHHHHHH`: one line, nothing for a terminal to act on."""
    import shlex

    if all(c.isprintable() for c in word):
        return shlex.quote(word)
    out = []
    for c in word:
        o = ord(c)
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        else:
            out.append(f"\\x{o:02x}" if o < 0x80 else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
    return "$'" + "".join(out) + "'"


def shell_line(words: list[str]) -> str:
    """A command line (`shlex.join` where every word is printable): what a user pastes into a shell."""
    return " ".join(shell_word(str(w)) for w in words)
