"""Typed results: the values `scorers.evaluate.evaluate` / `scorers.sweep.sweep_all`
(`EvaluationResult`), `scorers.sweep.sweep` (`SweepResult`) and `scorers.compare.compare`
(`ComparisonResult`) return. Pure: no I/O; the JSON schema is docs/RESULTS.md.

Each is a frozen dataclass whose top-level fields are the result's keys, and at the same
time a read-only `dict` of those keys (`result["methods"]`, `result.get("ci")`, iteration,
`json.dumps(result)`, `isinstance(result, dict)`), so code written against the plain dicts
reads it unchanged. The nested tables (per method, per split, per group) are plain JSON
values (dicts, lists, numbers, strings, None). Fields marked optional are absent from the
mapping and from the JSON when None (e.g. `id_acc_ci`, present only with intervals).
Assigning a field or a key is a TypeError: build a changed copy with `dataclasses.replace`.

`records()` flattens it into one row per method and split / group (per setting for a sweep,
per pair and test for a comparison: `scorers.tabular`, what `--out FILE.csv` writes), and
`to_frame()` makes a pandas DataFrame of those rows where pandas is installed.

`to_json()` writes the mapping as JSON text (NumPy scalars and arrays as numbers and lists;
non-finite floats as Python's json writes them, NaN / Infinity, so that the round trip is
exact); `from_json(text or mapping)` reads it back, and raises ValueError naming an unknown
or missing key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

import numpy as np

R = TypeVar("R", bound="ResultMapping")


def optional(default: Any = None) -> Any:
    """A field that is left out of the mapping and the JSON while it is None."""
    return field(default=default, metadata={"optional": True})


def plain(value: Any) -> Any:
    """`value` as plain JSON values: mappings as dicts (string keys), tuples as lists, NumPy
    scalars and arrays as Python numbers and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


class ResultMapping(dict[str, Any]):
    """Base of the typed results: a read-only dict view of the dataclass's fields."""

    _MUTATORS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        dict.update(self, self._pairs())

    def _pairs(self) -> Iterator[tuple[str, Any]]:
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get("optional"):
                continue
            yield f.name, value

    def _frozen(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{type(self).__name__} is frozen; build a changed copy with "
                        "dataclasses.replace(result, field=value)")

    __setitem__ = __delitem__ = __ior__ = _frozen  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _frozen  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        """Copy and pickle through the constructor (dict's own protocol would set items)."""
        return type(self), tuple(getattr(self, f.name) for f in fields(self))  # type: ignore

    # ------------------------------------------------------------------ JSON
    def to_json(self, indent: int | None = None) -> str:
        """The result as JSON text (module docstring)."""
        return json.dumps(plain(self), indent=indent)

    # ------------------------------------------------------------------ tables
    def records(self) -> list[dict[str, Any]]:
        """The result's flat rows (`scorers.tabular.records`): what `--out FILE.csv` writes."""
        from .tabular import records

        return records(self)

    def to_frame(self) -> Any:
        """The rows of `records()` as a pandas DataFrame (ImportError naming the install
        command where pandas is not installed)."""
        from .tabular import to_frame

        return to_frame(self.records())

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def from_json(cls: type[R], data: str | bytes | Mapping[str, Any]) -> R:
        """The result read from JSON text or an already parsed mapping; ValueError naming an
        unknown key or a missing required one."""
        doc = json.loads(data) if isinstance(data, str | bytes) else dict(data)
        if not isinstance(doc, dict):
            raise ValueError(f"{cls.__name__}.from_json: expected a JSON object, got "
                             f"{type(doc).__name__}")
        names = cls.field_names()
        unknown = [k for k in doc if k not in names]
        if unknown:
            raise ValueError(f"{cls.__name__}.from_json: unknown key(s) {unknown} (valid: "
                             f"{', '.join(names)})")
        missing = [f.name for f in fields(cls)  # type: ignore[arg-type]
                   if f.name not in doc and not f.metadata.get("optional")]
        if missing:
            raise ValueError(f"{cls.__name__}.from_json: missing key(s) {missing}")
        return cls(**cls._typed(doc))

    @classmethod
    def _typed(cls, doc: dict[str, Any]) -> dict[str, Any]:
        """Hook: nested typed values rebuilt from their JSON (ComparisonResult)."""
        return doc


@dataclass(frozen=True, eq=False, repr=True)
class EvaluationResult(ResultMapping):
    """`evaluate` (and the tuned `sweep_all`): metrics of every method on every OOD test
    split. `methods[name]` holds params, adjusted, fit_seconds, score_seconds, cached,
    diagnostics, misclassification_auroc, misclassification, aurc, augrc, splits {split:
    metrics}, groups {group: metrics} (sweep_all adds chosen, fixed, val, grid,
    settings_scored)."""

    store: str
    model_sha256: str | None
    id_split: str
    id_acc: float | None
    ood_splits: list[str]
    methods: dict[str, dict[str, Any]]
    skipped: dict[str, str]
    tuned: bool | None = optional()
    select_by: str | None = optional()
    val_splits: dict[str, Any] | None = optional()
    ci: dict[str, Any] | None = None
    id_acc_ci: list[float | None] | None = optional()
    rule: str | None = optional()


@dataclass(frozen=True, eq=False, repr=True)
class SweepResult(ResultMapping):
    """`sweep`: the setting chosen on the val splits and its test metrics."""

    store: str
    model_sha256: str | None
    method: str
    select_by: str
    direction: str
    grid: dict[str, Any]
    grid_source: str
    base_params: dict[str, Any]
    val_splits: dict[str, Any]
    test_splits: dict[str, Any] | None
    chosen: dict[str, Any]
    test: dict[str, Any] | None
    settings: list[dict[str, Any]]
    adjusted: list[dict[str, Any]]
    fit_seconds: float
    val_seconds: float
    test_seconds: float
    rule: str | None = optional()
    openood: dict[str, Any] | None = optional()


@dataclass(frozen=True, eq=False, repr=True)
class ComparisonResult(ResultMapping):
    """`compare`: the evaluation with intervals and the paired tests of every pair."""

    store: str
    id_split: str
    methods: list[str]
    ci: dict[str, Any] | None
    evaluation: EvaluationResult
    splits: dict[str, Any]
    groups: dict[str, Any]
    skipped: dict[str, str]

    @classmethod
    def _typed(cls, doc: dict[str, Any]) -> dict[str, Any]:
        return {**doc, "evaluation": EvaluationResult.from_json(doc["evaluation"])}


RESULT_TYPES = (EvaluationResult, SweepResult, ComparisonResult)

__all__ = ["RESULT_TYPES", "ComparisonResult", "EvaluationResult", "ResultMapping",
           "SweepResult", "plain"]


def _numbers(table: Any, where: str) -> str | None:
    """Why `table` is not {metric: number or null} (a key ending `_ci` may hold [lo, hi])."""
    if not isinstance(table, dict):
        return f"{where} is {type(table).__name__}, expected {{metric: number}}"
    for key, value in table.items():
        if key.endswith("_ci") or key == "n":
            continue
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"{where}.{key} = {value!r}: expected a number"
    return None


def eval_json_problem(result: dict[str, Any]) -> str | None:
    """The first field of an `eval --out` JSON that the report cannot read, or None:
    `ood_splits` a list of text, `methods` {name: {splits: {split: metrics}, groups: {group:
    metrics}}} with every OOD split scored (metrics: numbers or null), `skipped` a table."""
    splits = result.get("ood_splits")
    if not isinstance(splits, list) or not all(isinstance(x, str) for x in splits):
        return f"ood_splits = {str(splits)[:60]}: expected a list of split names"
    if not isinstance(result.get("id_split", ""), str):
        return "id_split: expected a split name"
    methods = result["methods"]
    if not isinstance(methods, dict):
        return f"methods is {type(methods).__name__}, expected {{name: result}}"
    for name, res in methods.items():
        if not isinstance(res, dict) or not isinstance(res.get("splits"), dict) \
                or not isinstance(res.get("groups"), dict):
            return f"methods.{name}: expected a table with 'splits' and 'groups' tables"
        missing = [x for x in splits if x not in res["splits"]]
        if missing:
            return f"methods.{name}.splits has no {missing[0]!r}"
        for kind in ("splits", "groups"):
            for key, table in res[kind].items():
                problem = _numbers(table, f"methods.{name}.{kind}.{key}")
                if problem:
                    return problem
        if not isinstance(res.get("params", {}), dict) or not isinstance(
                res.get("adjusted") or [], list):
            return f"methods.{name}: params / adjusted of another type"
    if not isinstance(result.get("skipped") or {}, dict):
        return "skipped: expected {scorer: reason}"
    return None
