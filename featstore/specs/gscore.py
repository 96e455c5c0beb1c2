"""The Gscore spec (scorers.gscore, Zhang, Deng & Zheng's unsupervised evaluation of OOD
detection, "Unsupervised Evaluation of Out-of-distribution Detection: A Data-centric
Perspective"):
the variant names ("ude-wasserstein@0.93": `ModelSpec`, `parse_model`), the IND:OOD ratios
("1:100": `parse_ratio`) and the settings of one evaluation as a TOML file (`GscoreSpec`).

    methods = ["msp", "energy"]          # detectors evaluated
    models = ["kmeans-l2", "ude-wasserstein"]   # <modelling>-<distance>[@tau]
    targets = ["fpr95", "auroc"]
    ratio = "1:1"                        # IND:OOD of the meta-sets ("3:1", "1:100", 0.5)
    size = 100                           # samples per meta-set ("max" or absent: all)
    sets_per_split = 10
    repeats = 5
    seed = 0
    id_pools = "disjoint"                # or "shared"; disjoint: id_train_fraction of the
    id_train_fraction = 0.5              #   id/test rows for meta-train sets
    tau_from = "msp"                     # the detector tau is tuned on; "each": per detector

    [robustness]                         # the robustness table's settings
    ratios = ["1:10", "10:1"]
    sizes = [50, "max"]
    heterogeneous = true

    [params.knn]                         # a detector's parameters
    K = 50

Every key (`GSCORE_KEYS`) is an `evaluate_gscore` option of the same name, and `options()`
gives them back as its keyword arguments. `GscoreSpec.load(path or text)` reads the file with
the strict TOML reader (`featstore.specs.toml`: unknown keys and wrong types are one-line
errors) and checks every value but the detector names (the scorers' registry checks those);
`to_toml()` writes it back: `GscoreSpec.load(s.to_toml()) == s`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.specs.toml import check_keys, dumps, get, plain, read_toml

#: FPR at a TPR other than 95% (the paper's Table 4 F@T80 / F@T60): target -> TPR percent.
FPR_AT_TPR: dict[str, int] = {"fpr@tpr80": 80, "fpr@tpr60": 60}
TARGETS: tuple[str, ...] = ("auroc", "fpr95", "fpr@tpr80", "fpr@tpr60", "aupr_in", "aupr_out",
                            "detection_error")
MODELLINGS: tuple[str, ...] = ("kmeans", "gmm", "ude")
DISTANCES: tuple[str, ...] = ("l2", "kl", "kl_rev", "wasserstein", "w2")
#: The paper's Table 6 rows.
DEFAULT_MODELS: tuple[str, ...] = ("kmeans-l2", "gmm-kl", "gmm-wasserstein", "ude-kl",
                                   "ude-wasserstein")
UDE_KERNELS = ("gauss", "paper")
CORR_ON = ("test", "train")
ID_POOLS = ("disjoint", "shared")
#: Protocol defaults (scorers.gscore's package docstring, "Meta-sets and the evaluation
#: protocol").
ID_TRAIN_FRACTION = 0.5
SETS_PER_SPLIT = 10
TAU_FROM = "msp"
_AUTO = "auto"


@dataclass(frozen=True)
class ModelSpec:
    """One Gscore variant: modelling + distance + tau ("auto" = searched, float, or None)."""

    modelling: str
    distance: str
    tau: str | float | None

    @property
    def label(self) -> str:
        base = f"{self.modelling}-{self.distance}"
        if self.tau == _default_tau(self.modelling):
            return base
        return f"{base}@{'none' if self.tau is None else self.tau}"

    @property
    def title(self) -> str:
        names = {"kmeans": "Kmeans", "gmm": "GMM", "ude": "UDE", "l2": "l2", "kl": "KL",
                 "kl_rev": "KL rev", "wasserstein": "Wasserstein", "w2": "W2"}
        text = f"Gscore ({names[self.modelling]} + {names[self.distance]})"
        if self.tau != _default_tau(self.modelling):
            text += f" tau={'none' if self.tau is None else self.tau}"
        return text


def _default_tau(modelling: str) -> str | None:
    return _AUTO if modelling == "ude" else None


def _parse_tau(text: Any, modelling: str) -> str | float | None:
    if text is None or (isinstance(text, str) and text.lower() == "none"):
        tau: str | float | None = None
    elif isinstance(text, str) and text.lower() == _AUTO:
        tau = _AUTO
    else:
        try:
            tau = float(text)
        except (TypeError, ValueError):
            raise UsageError(f"tau {text!r}: expected 'auto', 'none' or a number in [0, 1]"
                             ) from None
        if not 0.0 <= tau <= 1.0:
            raise UsageError(f"tau {text!r}: must lie in [0, 1]")
    if modelling == "kmeans" and tau is not None:
        raise UsageError("tau: Kmeans has no threshold (use tau none)")
    if modelling == "ude" and tau is None:
        raise UsageError("tau: UDE needs a threshold ('auto' searches it on meta-train sets)")
    return tau


def parse_model(text: str, tau: Any = "default") -> ModelSpec:
    """'ude-wasserstein', 'gmm-kl@auto', 'ude-w2@0.93', 'gmm-wasserstein@none' -> ModelSpec.

    `tau` (if not "default") overrides a tau given after '@'."""
    base, _, tau_text = str(text).strip().partition("@")
    modelling, sep, dist = base.partition("-")
    if not sep or modelling not in MODELLINGS or dist not in DISTANCES:
        raise UsageError(f"model {text!r}: expected <modelling>-<distance>[@tau] with modelling "
                         f"in {', '.join(MODELLINGS)} and distance in {', '.join(DISTANCES)} "
                         "(e.g. ude-wasserstein)")
    if tau != "default":
        value = _parse_tau(tau, modelling)
    elif tau_text:
        value = _parse_tau(tau_text, modelling)
    else:
        value = _default_tau(modelling)
    return ModelSpec(modelling, dist, value)


def parse_ratio(text: Any) -> float:
    """'1:100' -> 0.01 (IND per OOD sample), '3' -> 3.0; must be > 0."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        a, sep, b = str(text).partition(":")
        try:
            value = float(a) / float(b) if sep else float(a)
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"ratio {text!r}: expected IND:OOD like 1:1 or 1:100") from None
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"ratio {text!r}: must be a positive IND:OOD ratio")
    return value


def ratio_label(ratio: float) -> str:
    if ratio >= 1:
        return f"{ratio:g}:1"
    return f"1:{1 / ratio:g}"


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise UsageError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    return target


def _fraction(value: float, key: str, where: str) -> None:
    if not 0.0 < value < 1.0:
        raise InputError(f"{where}: {key} = {value!r}: expected a number in (0, 1)")


def _at_least(value: int, low: int, key: str, where: str) -> None:
    if value < low:
        raise InputError(f"{where}: {key} = {value!r}: expected an integer >= {low}")


def _one_of(value: str, valid: tuple[str, ...], key: str, where: str) -> None:
    if value not in valid:
        raise InputError(f"{where}: {key} = {value!r}: expected one of {', '.join(valid)}")


@dataclass
class GscoreSpec:
    """The settings of one Gscore evaluation (module docstring); defaults are the paper's
    protocol (`scorers.gscore.evaluate_gscore`'s)."""

    methods: list[str] = field(default_factory=lambda: ["msp"])
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    targets: list[str] = field(default_factory=lambda: ["fpr95", "auroc"])
    ratio: str | float = "1:1"
    size: int | None = None                 # None: every row (TOML "max" or absent)
    heterogeneous: bool = False
    sets_per_split: int = SETS_PER_SPLIT
    repeats: int = 5
    seed: int = 0
    train_fraction: float = 0.75
    id_pools: str = "disjoint"
    id_train_fraction: float = ID_TRAIN_FRACTION
    tau_from: str = TAU_FROM
    splits: list[str] | None = None
    exclude: list[str] | None = None
    baselines: bool = True
    ude_kernel: str = "gauss"
    clip: bool = True
    cv: int | None = None
    corr_on: str = "test"
    paper: bool = False
    ratios: list[str | float] = field(default_factory=list)
    sizes: list[int | None] = field(default_factory=list)
    robust_heterogeneous: bool = False
    robust_models: list[str] | None = None
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False)

    @classmethod
    def load(cls, source: str | Path, base: str | Path | None = None) -> GscoreSpec:
        """Read and check a Gscore spec from a path or TOML text."""
        doc = read_toml(source, "gscore spec", base)
        spec = parse_gscore(doc.data, doc.where)
        spec.path = doc.path
        return spec

    def to_data(self) -> dict[str, Any]:
        """The spec in the TOML data model (what `parse_gscore` reads)."""
        data = {f.name: plain(getattr(self, f.name)) for f in fields(self)
                if f.name not in ("path", "params") and f.name not in _ROBUST.values()}
        robust = {key: plain(getattr(self, name)) for key, name in _ROBUST.items()}
        robust["sizes"] = ["max" if v is None else v for v in self.sizes]
        data["robustness"] = {k: v for k, v in robust.items() if v not in (None, [], False)}
        data["params"] = plain(self.params)
        return {k: v for k, v in data.items() if v is not None and v != {}}

    def to_toml(self, comment: str | None = None) -> str:
        return dumps(self.to_data(), comment=comment)

    def options(self) -> dict[str, Any]:
        """`evaluate_gscore`'s keyword arguments (shared pools: id_train_fraction None; tau
        from "each": tau_from None)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("path", "id_pools")}
        if self.id_pools == "shared":
            out["id_train_fraction"] = None
        if self.tau_from == "each":
            out["tau_from"] = None
        return out


#: [robustness] key -> GscoreSpec field
_ROBUST = {"ratios": "ratios", "sizes": "sizes", "heterogeneous": "robust_heterogeneous",
           "models": "robust_models"}
#: top-level key -> TOML type (`featstore.specs.toml.KINDS`)
_TYPES: dict[str, str | tuple[str, ...]] = {
    "methods": "str_list", "models": "str_list", "targets": "str_list",
    "ratio": ("str", "number"), "size": ("int", "str"), "heterogeneous": "bool",
    "sets_per_split": "int",
    "repeats": "int", "seed": "int", "train_fraction": "number", "id_pools": "str",
    "id_train_fraction": "number", "tau_from": "str", "splits": "str_list",
    "exclude": "str_list", "baselines": "bool", "ude_kernel": "str", "clip": "bool",
    "cv": "int", "corr_on": "str", "paper": "bool"}
#: every top-level key of a Gscore spec
GSCORE_KEYS = (*_TYPES, "robustness", "params")


def _size(value: Any, key: str, where: str) -> int | None:
    """A meta-set size: an integer, or "max" (None: every row)."""
    if value is None or value == "max":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: {key} = {value!r}: expected an integer >= 2 or \"max\"")
    return value


def _check_values(s: GscoreSpec, where: str) -> None:
    """Each value within its range; variant names, targets and ratios parsed."""
    try:
        for model in [*s.models, *(s.robust_models or [])]:
            parse_model(model)
        for target in s.targets:
            _check_target(target)
        for ratio in [s.ratio, *s.ratios]:
            parse_ratio(ratio)
    except UsageError as exc:
        raise InputError(f"{where}: {exc}") from None
    for key in ("sets_per_split", "repeats"):
        _at_least(getattr(s, key), 1, key, where)
    _at_least(s.seed, 0, "seed", where)
    for key, size in [("size", s.size), *(("[robustness] sizes", v) for v in s.sizes)]:
        if size is not None:
            _at_least(size, 2, key, where)
    if s.cv is not None:
        _at_least(s.cv, 2, "cv", where)
    _fraction(s.train_fraction, "train_fraction", where)
    _fraction(s.id_train_fraction, "id_train_fraction", where)
    _one_of(s.id_pools, ID_POOLS, "id_pools", where)
    _one_of(s.ude_kernel, UDE_KERNELS, "ude_kernel", where)
    _one_of(s.corr_on, CORR_ON, "corr_on", where)


def parse_gscore(data: dict[str, Any], where: str) -> GscoreSpec:
    """A GscoreSpec from a dict as loaded from TOML; `where` names the file in errors."""
    check_keys(data, GSCORE_KEYS, where)
    values = {key: get(data, key, kind, where) for key, kind in _TYPES.items() if key in data}
    robust = dict(get(data, "robustness", "table", where, {}))
    check_keys(robust, tuple(_ROBUST), f"{where} [robustness]")
    rwhere = f"{where} [robustness]"
    for key, kind in (("ratios", "list"), ("sizes", "list"), ("heterogeneous", "bool"),
                      ("models", "str_list")):
        if key in robust:
            values[_ROBUST[key]] = get(robust, key, kind, rwhere)
    values["size"] = _size(values.get("size"), "size", where)
    values["sizes"] = [_size(v, "[robustness] sizes", where) for v in values.get("sizes", [])]
    params = dict(get(data, "params", "table", where, {}))
    for method, table in params.items():
        get(params, method, "table", f"{where} [params]")
        params[method] = dict(table)
    spec = GscoreSpec(**values, params=params)
    _check_values(spec, where)
    return spec
