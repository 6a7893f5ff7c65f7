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
