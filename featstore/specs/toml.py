"""The one strict TOML reader and writer of the spec models (benchmark, experiment, Gscore).

Reading (`read_toml`): a path or TOML text becomes a `Document` (the parsed tables, the
directory relative paths resolve against, and the name errors give it). The spec models then
check each table with `check_keys` (an unknown key is an InputError naming the file, the
table, the key, the valid keys and the closest one) and read values with `get` (a value of
the wrong type is an InputError naming the file, the table, the key, the value and the type
expected). Every error is one line.

Writing (`dumps`): a dict in the TOML data model becomes TOML text: plain values first, then
one `[table]` per dict value (except the keys named `inline`, written as inline tables),
then one `[[table]]` per item of a list of dicts. `None` values are left out (TOML has no
null); `tomllib.loads(dumps(d))` equals `d` without its `None` values.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from featstore.errors import InputError

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
#: characters a TOML comment cannot hold (control characters but tab)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class Document:
    """A parsed TOML file or text: its top-level table, the directory its relative paths
    resolve against, its name in errors ("spec 'bench.toml'") and its path (None for text)."""

    data: dict[str, Any]
    base: Path
    where: str
    path: Path | None


def is_text(source: str | Path) -> bool:
    """A `str` holding TOML text rather than a path: it has a newline or an '='."""
    return isinstance(source, str) and ("\n" in source or "=" in source)


def read_toml(source: str | Path, what: str, base: str | Path | None = None) -> Document:
    """Parse `source`, a path (a `Path`, or a `str` without newline and '=') or TOML text;
    `what` names the kind of file in errors ("spec", "experiment"). Relative paths of text
    resolve against `base` (default: the working directory), of a file against its
    directory. InputError (one line) when the file is missing or unreadable or the TOML
    invalid."""
    if is_text(source):
        text, path = str(source), None
        where = f"{what} (TOML text)"
        root = Path(base) if base is not None else Path.cwd()
    else:
        path = Path(source)
        where = f"{what} {str(path)!r}"
        if not path.is_file():
            raise InputError(f"{where}: file not found")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{where}: unreadable ({exc})") from None
        root = Path(base) if base is not None else path.parent.resolve()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: invalid TOML ({exc})") from None
    except RecursionError:  # valid TOML nested deeper than tomllib's recursive parser goes
        raise InputError(f"{where}: arrays or tables nested too deep to read (featstore's "
                         f"files nest at most {MAX_DEPTH} levels)") from None
    if nesting_depth(data) > MAX_DEPTH:
        raise InputError(f"{where}: arrays or tables nested more than {MAX_DEPTH} levels "
                         "deep (featstore's files need a few)")
    return Document(data, root.resolve(), where, path)


#: the deepest nesting of arrays / tables a featstore TOML file may hold: every reader walks
#: the data recursively, so a file deeper than this is refused before any of them runs
MAX_DEPTH = 32


def nesting_depth(value: Any) -> int:
    """How deep lists and dicts nest in `value` (a scalar 0), counted without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            if depth + 1 > MAX_DEPTH:
                return depth + 1
            deepest = max(deepest, depth + 1)
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                 else item))
    return deepest


def check_keys(table: Mapping[str, Any], valid: Iterable[str], where: str) -> None:
    """InputError naming the first key of `table` not in `valid`, the valid keys and, when
    one is close, a did-you-mean: "<where>: unknown key 'usgae' (valid: name, usage,
    source); did you mean 'usage'?"."""
    valid = list(valid)
    for key in table:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(f"{where}: unknown key {key!r} (valid: {', '.join(valid)}){hint}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


#: what `get` accepts for each kind name, and how the error words it
KINDS: dict[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (_is_int, "an integer"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "number": (_is_number, "a number"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "table": (lambda v: isinstance(v, dict), "a table"),
    "str_list": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                 "a list of strings"),
    "int_list": (lambda v: isinstance(v, list) and all(_is_int(x) for x in v),
                 "a list of integers"),
}


def get(table: Mapping[str, Any], key: str, kinds: str | tuple[str, ...], where: str,
        default: Any = None) -> Any:
    """`table[key]` (or `default` when absent), of one of `kinds` (names of `KINDS`);
    otherwise InputError "<where>: <key> = <value>: expected <kind> [or <kind>]"."""
    if key not in table:
        return default
    value = table[key]
    names = (kinds,) if isinstance(kinds, str) else kinds
    if any(KINDS[k][0](value) for k in names):
        return value
    expected = " or ".join(KINDS[k][1] for k in names)
    raise InputError(f"{where}: {key} = {value!r}: expected {expected}")


def plain(value: Any) -> Any:
    """A deep copy of `value` in the TOML data model: tuples become lists, mappings dicts
    (what `tomllib` gives back for the same text)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def toml_key(key: str) -> str:
    """A bare key when it can be one, else a quoted key."""
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_string(text: str) -> str:
    """A TOML basic string (JSON escapes are TOML escapes; DEL escaped too)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: object) -> str:
    """A TOML literal for the plain values a spec holds (str, number, bool, list, dict);
    None values inside a dict are left out."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = [f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()
                 if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"no TOML literal for {type(value).__name__}")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping)
                                                           for v in value)


def _body(table: Mapping[str, Any]) -> list[str]:
    return [f"{toml_key(str(k))} = {toml_value(v)}" for k, v in table.items() if v is not None]


def dumps(data: Mapping[str, Any], *, inline: Collection[str] = (),
          comment: str | None = None) -> str:
    """TOML text of `data` (the module docstring's layout); `comment` lines come first (its
    control characters but tab, which a TOML comment cannot hold, become spaces)."""
    lines = [f"# {_CONTROL.sub(' ', line)}".rstrip() for line in comment.splitlines()
             ] if comment else []
    tables = {k: v for k, v in data.items()
              if isinstance(v, Mapping) and k not in inline}
    arrays = {k: v for k, v in data.items() if k not in tables and _is_table_array(v)}
    lines += _body({k: v for k, v in data.items() if k not in tables and k not in arrays})
    for name, table in tables.items():
        lines += ["", f"[{toml_key(str(name))}]", *_body(table)]
    for name, items in arrays.items():
        for item in items:
            lines += ["", f"[[{toml_key(str(name))}]]", *_body(item)]
    return "\n".join(lines).lstrip("\n") + "\n"
