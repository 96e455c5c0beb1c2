"""The shape of an experiment's results.json as the table renderers read it
(`featstore.workflows.experiments.render`, `paper_layout`): checked before `featstore table`
renders a file, so a file of another shape (hand-edited, truncated to another structure, of
another tool) is one error line naming the file and the field, never a KeyError or TypeError
inside the renderers.

Checked: `experiment` a table with `name` (text), `seeds` (a list), `tune_rule` and
`select_by` (text), `runs` (an integer, optional), `osr` (absent, null or a table with
`data`), `spec` (absent, null or text), `train` (a table, absent or null); `arch` text or
null; `wall_s` a number; `skipped` a list of {split, seed, method, reason}; `aggregate` {data
split: {method: entry}} where an entry has integer `n` and `skipped` (>= 0), `groups` {group:
{metric: summary or null}}, `id_acc`, `method_s`, `total_s` (summary or null) and `flags`
(a list of text, optional); a summary is {mean, std: number or null, n: integer}.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from featstore.errors import InputError

SUMMARY_KEYS = ("id_acc", "method_s", "total_s")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def _summary(stat: Any, where: str) -> str | None:
    if stat is None:
        return None
    if not isinstance(stat, Mapping):
        return f"{where} is {type(stat).__name__}, expected {{mean, std, n}}"
    if not (_is_num(stat.get("mean")) and _is_num(stat.get("std")) and _is_int(stat.get("n"))):
        return f"{where} = {stat!r}: expected {{mean, std: numbers, n: an integer}}"
    return None


def _entry(entry: Any, where: str, full: bool) -> str | None:
    if not isinstance(entry, Mapping):
        return f"{where} is {type(entry).__name__}, expected a table"
    for key in ("n", "skipped"):
        if not _is_int(entry.get(key)) or entry[key] < 0:
            return f"{where}.{key} = {entry.get(key)!r}: expected an integer >= 0"
    groups = entry.get("groups")
    if not isinstance(groups, Mapping) or not all(isinstance(g, Mapping)
                                                  for g in groups.values()):
        return f"{where}.groups: expected {{group: {{metric: summary}}}}"
    for group, metrics in groups.items():
        for metric, stat in metrics.items():
            problem = _summary(stat, f"{where}.groups.{group}.{metric}")
            if problem:
                return problem
    for key in SUMMARY_KEYS:
        if key not in entry:
            if full:
                return f"{where}.{key} is missing"
            continue
        problem = _summary(entry[key], f"{where}.{key}")
        if problem:
            return problem
    flags = entry.get("flags")
    if flags is not None and not (isinstance(flags, list)
                                  and all(isinstance(f, str) for f in flags)):
        return f"{where}.flags: expected a list of text"
    return None


def _experiment(exp: Any, full: bool) -> str | None:
    if not isinstance(exp, Mapping):
        return "'experiment' is not a table"
    for key in ("name", "tune_rule", "select_by"):
        if (full or exp.get(key) is not None) and not isinstance(exp.get(key), str):
            return f"experiment.{key} = {exp.get(key)!r}: expected text"
    if (full or "seeds" in exp) and not isinstance(exp.get("seeds"), list):
        return f"experiment.seeds = {exp.get('seeds')!r}: expected a list"
    if "runs" in exp and not _is_int(exp["runs"]):
        return f"experiment.runs = {exp['runs']!r}: expected an integer"
    osr = exp.get("osr")
    if osr is not None and not (isinstance(osr, Mapping) and "data" in osr):
        return f"experiment.osr = {osr!r}: expected a table with 'data'"
    if exp.get("spec") is not None and not isinstance(exp["spec"], str):
        return f"experiment.spec = {exp['spec']!r}: expected text"
    if exp.get("train") is not None and not isinstance(exp["train"], Mapping):
        return f"experiment.train = {exp['train']!r}: expected a table"
    return None


def results_problem(data: Mapping[str, Any], full: bool = True) -> str | None:
    """The first field of `data` (a results.json's top-level table) of another shape than
    the module docstring's, as `field = value: expected ...`, or None. `full`: every field
    the default layout prints must be there; else (the paper layout) only `aggregate`'s
    entries with `n`, `skipped` and `groups`, the other fields of their type when present."""
    problem = _experiment(data.get("experiment"), full)
    if problem:
        return problem
    if data.get("arch") is not None and not isinstance(data["arch"], str):
        return f"arch = {data['arch']!r}: expected text"
    if (full or "wall_s" in data) and (not _is_num(data.get("wall_s"))
                                        or data.get("wall_s") is None):
        return f"wall_s = {data.get('wall_s')!r}: expected a number"
    skipped = data.get("skipped", None if full else [])
    keys = ("split", "seed", "method", "reason")
    if not isinstance(skipped, list) or not all(
            isinstance(s, Mapping) and all(k in s for k in keys)
            and all(isinstance(s[k], str) for k in ("split", "method", "reason"))
            for s in skipped):
        return "skipped: expected a list of {split, seed, method, reason}"
    aggregate = data.get("aggregate")
    if not isinstance(aggregate, Mapping) or not all(isinstance(a, Mapping)
                                                     for a in aggregate.values()):
        return "aggregate: expected {data split: {method: entry}}"
    for split, methods in aggregate.items():
        for method, entry in methods.items():
            problem = _entry(entry, f"aggregate.{split}.{method}", full)
            if problem:
                return problem
    return None


def check_results(data: Mapping[str, Any], where: str, full: bool = True) -> None:
    """InputError `<where>: <problem> (not the results of featstore run)` when
    `results_problem` finds one."""
    problem = results_problem(data, full)
    if problem:
        raise InputError(f"{where}: {problem} (not the results of `featstore run` as this "
                         "featstore writes them)")
