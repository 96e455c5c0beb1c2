"""Untrusted strings (a store's model, split and method names, an experiment's name) made safe
for where they are shown: a terminal and Markdown.

- `term_text`: every control character except newline and tab (C0, DEL and C1: ESC starts
  ANSI / OSC sequences that retitle, clear or recolour a terminal) is written as its
  `\\xNN` escape, so what reaches the terminal is visible text only.
- `md_text`: HTML-escaped (`<script>` shows as text), `|`, `[`, `]` backslashed and newlines
  turned into spaces, so a value stays inside its table cell.
- `html_text`: HTML-escaped (quotes too: safe in an attribute), control characters as `\\xNN`.
- `markup_text`: `term_text` with rich's markup escaped (`[transform]` is printed, not taken
  for a style tag), for a string interpolated into rich markup.
- `one_line`: newlines and other control characters of a value written into a one-line
  comment of a generated file (a spec's header) escaped the same way as `term_text`.
"""

from __future__ import annotations

import html
import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def term_text(value: object) -> str:
    """`str(value)` with every control character but newline and tab as `\\xNN`."""
    return _CONTROL.sub(_escape, str(value))


def one_line(value: object) -> str:
    """`str(value)` with every control character, newline and tab included, as `\\xNN`."""
    return _CONTROL_OR_NEWLINE.sub(_escape, str(value))


def md_text(value: object) -> str:
    """Text safe in a Markdown table cell or heading: HTML escaped (a name holding `<script>`
    or `<img onerror=...>` shows as text, never as markup), `|`, `[`, `]` and newlines
    neutralised, other control characters as `\\xNN`."""
    text = html.escape(term_text(" ".join(str(value).splitlines())), quote=False)
    return text.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def html_text(value: object) -> str:
    """Text safe in HTML content or a quoted attribute: `term_text`, then HTML-escaped
    (`<`, `>`, `&`, both quotes)."""
    return html.escape(term_text(value), quote=True)


def markup_text(value: object) -> str:
    """`term_text(value)` with rich markup escaped (`rich.markup.escape`: `[bold]` and
    `[transform]` are shown as written), for user text or literal brackets placed inside a
    rich markup string."""
    from rich.markup import escape  # lazy: the store layer does not need rich to load

    return escape(term_text(value))


__all__ = ["html_text", "markup_text", "md_text", "one_line", "term_text"]
