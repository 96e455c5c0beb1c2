"""`featstore.Detector`: a fitted scorer and a threshold, saved as one safe HDF5 file and
loaded back to score new feature batches with in/out decisions.

    det = Detector.fit(store, "vim", target_tpr=0.95)      # threshold on id/val
    det.save("vim.detector.h5")
    det = Detector.load("vim.detector.h5")
    scores, is_id = det.score_features(features, logits)    # logits optional (from the head)
    scores, is_id = det.score_images(["a.png", "folder/", "list.txt"])   # the store's model

Fit: the scorer (a name, `module:Class`, a class or an instance) is built with its defaults
clamped to the store by `scorers.adapt.fit_defaults` (what `featstore score` runs) and fitted
on the store. Threshold, on `threshold_split`'s scores (default `id/val`): with `target_tpr`
(default 0.95) the largest t with mean(s_id >= t) >= target_tpr, i.e. t = sort(s_id)[floor((1
- target_tpr) N)]; with `target_fpr` instead, the smallest t with mean(s_ood >= t) <=
target_fpr over the store's val OOD splits pooled. A row is in-distribution when score >= t.

The artifact (HDF5, nothing pickled, loading executes no code): attributes `format`
(`featstore-detector`), `version`, `scorer` (the registered name), `params` (JSON),
`threshold`, `rule` (JSON: target and split), `model_sha256`, `model` (JSON, absent when the
store records no model with a transform, e.g. an ArrayStore: the store's model reference as
extraction recorded it: `name` (torchvision architecture, `module:callable` or TorchScript
path), `kind`, `architecture`, `weights` (path), `sha256`, `sha256_of`, `transform`,
`head_layer`, and the feature `dtype`); the head under /head and the arrays of every split
the scorer fits on (its `fit:` needs) under /fit/<slug>. Load rebuilds
the scorer by refitting it on those arrays (`featstore.ArrayStore`: the same arrays give the
same state, so the same scores). The scorer must be registered when loading (a built-in, an
entry point, or a class the caller has imported and registered): a module named in the file
is never imported.

Images (`score_images`): the model is loaded with featstore's loader (`featstore.extraction.models.
load_model`, weights by `torch.load(weights_only=True)`) from the recorded reference; a
torchvision architecture loads by itself, while a `module:callable` or a TorchScript file is
code, so it loads only when the caller names it (`model=`, `--model`): the file never makes
featstore import or run anything outside featstore. The one exception is featstore's own
demo models (`featstore.extraction.zoo.OWN_MODELS`: the pretrained EfficientNet-Lite0
classifier and the scratch ResNet), code of the installed package itself, which a detector
fitted on the demo store loads by its recorded name. The loaded model must be the one the
store was extracted with: its architecture, sha256 (of the weights file, or of the state dict)
and head (W, b) equal the recorded ones, else InputError. Features and logits are computed as
extraction computes them (`featstore.extraction.extract_images`), features cast to the recorded
dtype, and scored by `score_features` with the model's own logits: the scores `featstore score`
gives for the same images extracted into a store.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from numpy.typing import ArrayLike

from featstore.errors import FeatstoreError, InputError, UsageError
from featstore.store.arraystore import ArrayStore
from featstore.store.fileio import atomic_write_bytes
from featstore.store.interfaces import StoreLike
from featstore.store.interrupts import raise_if_interrupted
from featstore.store.verify import hdf5_link_problem
from featstore.version import __version__
from scorers.adapt import fit_defaults
from scorers.base import Scorer, fit_split_names, value_fields
from scorers.registry import REGISTRY, is_registered, resolve, unknown_scorer

if TYPE_CHECKING:
    from featstore.extraction.models import LoadedModel

FORMAT = "featstore-detector"
FORMAT_VERSION = 1
MODEL_KEYS = ("name", "kind", "architecture", "weights", "sha256", "sha256_of", "transform",
              "head_layer")


def tpr_threshold(id_scores: np.ndarray, target_tpr: float) -> float:
    """The largest t with mean(id_scores >= t) >= target_tpr."""
    s = np.sort(np.asarray(id_scores, dtype=np.float64))
    if s.size == 0:
        raise InputError("no ID rows to choose the threshold on (the threshold split has 0 "
                         "rows)")
    return float(s[int(math.floor((1.0 - target_tpr) * len(s)))])


def fpr_threshold(ood_scores: np.ndarray, target_fpr: float) -> float:
    """The smallest t with mean(ood_scores >= t) <= target_fpr."""
    s = np.sort(np.asarray(ood_scores, dtype=np.float64))
    if s.size == 0:
        raise InputError("no OOD rows to choose the threshold on (the val OOD splits have 0 "
                         "rows)")
    keep = int(math.floor(target_fpr * len(s)))  # OOD rows allowed at or above t
    return -math.inf if keep >= len(s) else float(np.nextafter(s[len(s) - keep - 1], np.inf))


@dataclass
class Detector:
    """A fitted scorer, its threshold and how the threshold was chosen (module docstring)."""

    scorer: Scorer
    threshold: float
    rule: dict[str, Any]
    model: dict[str, Any] | None = None
    # ((model, weights) asked for, the model loaded for them): load_model's one-entry cache
    _loaded: tuple[tuple[str | None, str | None], LoadedModel] | None = field(
        default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.threshold = check_threshold(float(self.threshold))

    @classmethod
    def fit(cls, store: StoreLike, scorer: str | type[Scorer] | Scorer, *,
            params: dict[str, Any] | None = None, target_tpr: float | None = None,
            target_fpr: float | None = None, threshold_split: str = "id/val") -> Detector:
        """Fit `scorer` on `store` and choose the threshold (module docstring)."""
        if target_tpr is not None and target_fpr is not None:
            raise UsageError("Detector.fit: give target_tpr or target_fpr, not both")
        given = {**(scorer.given if isinstance(scorer, Scorer) else {}), **(params or {})}
        name = resolve(scorer)
        used, _ = fit_defaults(REGISTRY[name](**given), given, store)
        fitted = REGISTRY[name](**used).fit(store)
        if not store.has_split(threshold_split):
            raise UsageError(f"Detector.fit: store {str(store.path)!r} has no split "
                             f"{threshold_split!r} to choose the threshold on")
        if target_fpr is not None:
            if not 0 <= target_fpr <= 1:
                raise UsageError(f"target_fpr={target_fpr} must lie in [0, 1]")
            ood = store.splits(role="ood", usage="val")
            if not ood:
                raise UsageError("Detector.fit: target_fpr needs OOD splits flagged val")
            pooled = np.concatenate([fitted.score(store.split(s)) for s in ood])
            rule = {"target_fpr": target_fpr, "splits": ood}
            return cls(fitted, fpr_threshold(pooled, target_fpr), rule,
                       model_record(store, threshold_split))
        tpr = 0.95 if target_tpr is None else target_tpr
        if not 0 < tpr <= 1:
            raise UsageError(f"target_tpr={tpr} must lie in (0, 1]")
        id_scores = fitted.score(store.split(threshold_split))
        return cls(fitted, tpr_threshold(id_scores, tpr),
                   {"target_tpr": tpr, "splits": [threshold_split]},
                   model_record(store, threshold_split))

    # ------------------------------------------------------------------ scoring
    def score_features(self, features: ArrayLike, logits: ArrayLike | None = None,
                       extras: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores (N,) float64, in-distribution decisions (N,) bool: score >= threshold)
        of rows given as arrays or torch tensors; logits from the head when absent."""
        scores = self.scorer.score_arrays(features, logits, extras)
        return scores, scores >= self.threshold

    def score_images(self, images: str | Path | Sequence[str | Path], *,
                     model: str | None = None, weights: str | Path | None = None,
                     device: str = "auto", batch_size: int = 128,
                     num_workers: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(scores, in-distribution decisions) of image files, folders or image lists
        (`featstore.extraction.extract_images.image_paths`, in that order) through the recorded
        model (module docstring); `model` / `weights` name the model code / weights file to load
        instead of the recorded ones (checked against the recorded sha256 and head)."""
        check_loader(batch_size, num_workers)
        # lazy: torch and torchvision load only for images; score_features runs without them
        from featstore.extraction.extract_images import image_outputs, image_paths
        from featstore.extraction.models import resolve_device

        paths = image_paths(images)
        dev = resolve_device(device)
        loaded = self.load_model(model, weights)
        rec = self.model
        assert rec is not None  # load_model refuses a detector that records no model
        loaded.module.to(dev)
        feats, logits = image_outputs(loaded, rec["transform"], paths, device=dev,
                                      batch_size=batch_size, num_workers=num_workers)
        return self.score_features(feats.astype(rec.get("dtype", "float32")), logits)

    def load_model(self, model: str | None = None,
                   weights: str | Path | None = None) -> LoadedModel:
        """The recorded model as a `featstore.extraction.models.LoadedModel` (loaded once per
        (model, weights), then kept), checked to be the store's (module docstring)."""
        key = (model, None if weights is None else str(weights))
        if self._loaded is not None and self._loaded[0] == key:
            return self._loaded[1]
        # lazy: torch, torchvision and the demo's models load only for images
        from featstore.extraction.models import load_model, model_spec_kind
        from featstore.extraction.zoo import OWN_MODELS, canonical_model_name

        rec = self.model
        if rec is None:
            raise UsageError("this detector was fitted on a store that records no model and "
                             "transform (arrays); it scores features only (score_features)")
        # what the recorded name would load as, by the loader's own rule (never the record's
        # `kind`, which a tampered file can set to "torchvision" beside a module:callable)
        kind = model_spec_kind(rec["name"])
        own = kind == "callable" and canonical_model_name(rec["name"]) in OWN_MODELS.values()
        if model is None and kind != "torchvision" and not own:
            raise UsageError(f"the detector's model is {kind or 'code'} {rec['name']!r}, which "
                             "is code: a detector never loads it by itself; name it to load it "
                             f"(model={rec['name']!r}, --model {rec['name']})")
        weights = weights if weights is not None else rec.get("weights")
        if weights is not None and not Path(weights).is_file():
            raise InputError(f"the detector's weights file {str(weights)!r} is not there; pass "
                             "the file's new path (weights=, --weights)")
        spec = model or rec["name"]
        layer = None if model_spec_kind(spec) == "torchscript" else rec.get("head_layer")
        loaded = load_model(spec, weights, feature_layer=layer)
        check_model(loaded, rec, self.scorer.fitted_store.head)
        self._loaded = (key, loaded)
        return loaded

    # ------------------------------------------------------------------ artifact
    def save(self, path: str | Path) -> Path:
        """Write the artifact (module docstring) atomically; returns its path."""
        store = self.scorer.fitted_store
        path = Path(path)
        buffer = io.BytesIO()
        with h5py.File(buffer, "w") as fh:
            meta = {"format": FORMAT, "version": FORMAT_VERSION, "featstore_version":
                    __version__, "scorer": self.scorer.name,
                    "params": json.dumps(self.scorer.params), "threshold": self.threshold,
                    "rule": json.dumps(self.rule), "model_sha256": store.model_sha256}
            if self.model is not None:
                meta["model"] = json.dumps(self.model)
            fh.attrs.update(meta)
            weight, bias = store.head
            fh.create_dataset("head/weight", data=weight)
            fh.create_dataset("head/bias", data=bias)
            for name in fit_split_names(self.scorer):
                split = store.split(name)
                grp = fh.create_group(f"fit/{name.replace('/', '__')}")
                grp.attrs["name"] = name
                for field in ("features", "logits", "labels"):
                    grp.create_dataset(field, data=np.asarray(getattr(split, field)))
                for f in value_fields(self.scorer):
                    if f.startswith("extra:"):
                        grp.create_dataset(f"extras/{f[6:]}", data=np.asarray(split.read(f)))
        atomic_write_bytes(path, buffer.getvalue())
        return path

    @classmethod
    def load(cls, path: str | Path) -> Detector:
        """Read an artifact written by `save` and refit its scorer on the stored arrays;
        InputError naming the file for anything else (`read_artifact`)."""
        path = Path(path)
        try:
            fh = h5py.File(path, "r")
        except OSError as exc:
            raise InputError(f"detector {str(path)!r}: not an HDF5 file ({exc})") from None
        with fh:
            try:
                scorer, threshold, rule, model = read_artifact(fh)
            except Exception as exc:  # anything a tampered file raises: one line naming it
                raise_if_interrupted()
                detail = str(exc) if isinstance(exc, FeatstoreError) else (
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                raise InputError(f"detector {str(path)!r}: {detail}") from None
            return cls(scorer, threshold, rule, model)


def _attr(fh: h5py.File, key: str, kind: type, *, required: bool = True) -> Any:
    """Attribute `key` of the artifact as `kind` (str, or JSON text decoded to `kind`);
    ValueError naming the attribute when it is missing or of another type."""
    if key not in fh.attrs:
        if required:
            raise ValueError(f"attribute {key!r} is missing")
        return None
    value = fh.attrs[key]
    if not isinstance(value, str):
        raise ValueError(f"attribute {key!r} is {type(value).__name__}, expected text")
    if kind is str:
        return value
    try:
        decoded = json.loads(value)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"attribute {key!r} is not valid JSON ({exc})") from None
    if not isinstance(decoded, kind):
        raise ValueError(f"attribute {key!r} is JSON {type(decoded).__name__}, expected "
                         f"{'an object' if kind is dict else kind.__name__}")
    return decoded


def _read_fit_splits(fh: h5py.File) -> dict[str, dict[str, Any]]:
    """name -> arrays of every /fit/<slug> group (features, logits, labels, extras)."""
    fit = fh.get("fit")
    if fit is None:
        return {}
    if not isinstance(fit, h5py.Group):
        raise ValueError("'fit' is not a group")
    splits: dict[str, dict[str, Any]] = {}
    for slug, grp in fit.items():
        name = grp.attrs.get("name") if isinstance(grp, h5py.Group) else None
        if not isinstance(name, str):
            raise ValueError(f"'fit/{slug}' is not a group with a text 'name' attribute")
        arrays: dict[str, Any] = {}
        for f in ("features", "logits", "labels"):
            if not isinstance(grp.get(f), h5py.Dataset):
                raise ValueError(f"split {name!r} ('fit/{slug}') has no dataset {f!r}")
            arrays[f] = grp[f][()]
        if "extras" in grp:
            arrays["extras"] = {k: grp["extras"][k][()] for k in grp["extras"]}
        splits[name] = arrays
    return splits


def read_artifact(fh: h5py.File) -> tuple[Scorer, float, dict[str, Any],
                                          dict[str, Any] | None]:
    """(fitted scorer, threshold, rule, model record) of an open artifact, checked before any
    use: the format version this module writes, no HDF5 link or outside storage (the store
    readers' `hdf5_link_problem`), a registered scorer name that is not `module:Class`
    (nothing is imported), every attribute of its type, a head (W, b) and fit arrays that
    agree, a threshold that is a number (not NaN). Raises on the first fault (the caller
    names the file)."""
    if fh.attrs.get("format") != FORMAT:
        raise InputError(f"not a featstore detector (no format={FORMAT!r} attribute)")
    version = fh.attrs.get("version")
    if not isinstance(version, int | np.integer) or int(version) != FORMAT_VERSION:
        raise InputError(f"format version {version!r} is not one this featstore "
                         f"{__version__} reads ({FORMAT_VERSION}); save the detector again "
                         "with this version")
    link = hdf5_link_problem(fh)
    if link:
        raise InputError(link)
    name = _attr(fh, "scorer", str)
    if ":" in name or not is_registered(name):
        raise InputError(f"{unknown_scorer(name)}; import and register its class first "
                         "(a detector never imports code)")
    params = _attr(fh, "params", dict)
    rule = _attr(fh, "rule", dict)
    model = _attr(fh, "model", dict, required=False)
    if model is not None and not isinstance(model.get("name"), str):
        raise ValueError("attribute 'model' has no text 'name'")
    sha = _attr(fh, "model_sha256", str)
    threshold = fh.attrs.get("threshold")
    if not isinstance(threshold, float | int | np.floating | np.integer):
        raise ValueError(f"attribute 'threshold' is {threshold!r}, expected a number")
    for key in ("head/weight", "head/bias"):
        if not isinstance(fh.get(key), h5py.Dataset):
            raise ValueError(f"dataset {key!r} is missing")
    head = (fh["head/weight"][()], fh["head/bias"][()])
    splits = _read_fit_splits(fh)
    dtype = next((str(a["features"].dtype) for a in splits.values()), "float32")
    store = ArrayStore(head, splits=splits, dtype=dtype, model_sha256=sha)
    scorer = REGISTRY[name](**params).fit(store)
    return scorer, check_threshold(float(threshold)), rule, model


def check_threshold(threshold: float) -> float:
    """`threshold` when it can decide (a number or -inf: every row in-distribution), else
    InputError: NaN compares false with every score (every row OOD), +inf likewise."""
    if math.isnan(threshold) or threshold == math.inf:
        raise InputError(f"threshold {threshold} cannot decide (every row would be OOD); "
                         "fit the detector again")
    return threshold


def check_loader(batch_size: Any, num_workers: Any) -> None:
    """UsageError naming the parameter unless batch_size >= 1 and num_workers >= 0 are
    integers (`--batch-size`, `--workers` of `predict`)."""
    for param, value, least in (("batch_size", batch_size, 1), ("num_workers", num_workers, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UsageError(f"must be an integer >= {least}", param=param, value=value)


def model_record(store: StoreLike, split: str) -> dict[str, Any] | None:
    """The store's model reference (module docstring), None when it records no model with a
    transform (an ArrayStore, or `Store.from_arrays` without that provenance)."""
    provenance = getattr(store, "provenance", None) or {}
    if not provenance.get("name") or not provenance.get("transform"):
        return None
    record = {k: provenance.get(k) for k in MODEL_KEYS}
    if record["weights"] is not None:
        record["weights"] = str(Path(record["weights"]).resolve())
    record["dtype"] = store.split(split).dtype
    return record


def check_model(loaded: LoadedModel, record: dict[str, Any],
                head: tuple[np.ndarray, np.ndarray]) -> None:
    """InputError unless `loaded` is the recorded model: same architecture (the torchvision
    name, the callable's class, the TorchScript's original name), sha256 and head (W, b)."""
    arch = loaded.provenance.get("architecture")
    if record.get("architecture") is not None and arch != record["architecture"]:
        raise InputError(f"model {loaded.provenance['name']!r}: architecture {arch!r}, the "
                         f"detector's is {record['architecture']!r}; load the model the store "
                         "was extracted with")
    got = loaded.provenance["sha256"]
    if got != record["sha256"]:
        raise InputError(f"model {loaded.provenance['name']!r}: sha256 {got[:12]}… differs "
                         f"from the detector's {str(record['sha256'])[:12]}… (of the "
                         f"{record.get('sha256_of')}); load the model the store was "
                         "extracted with")
    if loaded.head is None:
        raise InputError(f"model {loaded.provenance['name']!r}: no classifier head (a Linear "
                         "layer) to compare with the detector's head")
    weight = loaded.head.weight.detach().cpu().float().numpy()
    bias = loaded.head.bias.detach().cpu().float().numpy()
    if weight.shape != head[0].shape or not (np.array_equal(weight, head[0])
                                             and np.array_equal(bias, head[1])):
        raise InputError(f"model {loaded.provenance['name']!r}: its head "
                         f"{loaded.provenance['head_layer']!r} differs from the detector's")


def predict(artifact: str | Path, images: str | Path | Sequence[str | Path], *,
            model: str | None = None, weights: str | Path | None = None, device: str = "auto",
            batch_size: int = 128, num_workers: int = 0) -> dict[str, Any]:
    """`featstore predict`: load the detector at `artifact` and score `images`
    (`Detector.score_images`); {detector, scorer, params, threshold, rule, num_id, num_ood,
    rows: [{image, score, is_id}]} in input order; a file name's bytes that are not UTF-8
    are written `\\xNN` (`printable_id`, as extraction stores ids)."""
    # lazy: torch and torchvision load only for images
    from featstore.extraction.datasets import printable_id
    from featstore.extraction.extract_images import image_paths

    check_loader(batch_size, num_workers)  # before the detector and the model load
    det = Detector.load(artifact)
    paths = image_paths(images)
    scores, is_id = det.score_images(paths, model=model, weights=weights, device=device,
                                     batch_size=batch_size, num_workers=num_workers)
    rows = [{"image": printable_id(p), "score": float(s), "is_id": bool(d)}  # \xNN: not UTF-8
            for p, s, d in zip(paths, scores, is_id, strict=True)]
    return {"detector": str(artifact), "scorer": det.scorer.name, "params": det.scorer.params,
            "threshold": det.threshold, "rule": det.rule, "num_id": int(is_id.sum()),
            "num_ood": int((~is_id).sum()), "rows": rows}
