"""The pytorch-ood 0.4 peer of each featstore scorer, in one place (issue 18: it was written out
in bench_scorers' table, bench_scorers' child and bench_sweep's refit side).

`PEERS[name]` says what the peer reads and fits on; `build(name, pod, head, params)` constructs
its detector from featstore's parameters (the scorer's defaults merged with a grid setting) and
returns a `Built`: the detector, `fit(fit_x, fit_y)` (None when the detector has no fit) and
`predict(x) -> tensor` over one scored array, lower = more ID as pytorch-ood scores (the
callers negate). Argument mapping, checked against featstore's defaults:

- percentiles: featstore's p in (0, 100) -> pytorch-ood's p / 100 (ReAct, ASH, SCALE, DICE);
- ViM's principal dimension: featstore's `dim`, or for dim None pytorch-ood's own rule
  `vim_dim(D)` (1000 at D >= 2048, else D // 2), used on both sides of every benchmark;
- ASH and SCALE read feature maps: the (N, D) features as (N, D, 1, 1) through the head;
- DICE predicts in batches of DICE_BATCH rows (its (N, C, D) intermediate);
- GradNorm takes the gradient of the head's weight only (as featstore and the official code);
- NNGuide is fitted on the bank featstore draws (`bank_rows`: ceil(alpha N) rows of id/train,
  default_rng(seed)), which the caller passes in `params["bank_rows"]`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DICE_BATCH = 64


@dataclass(frozen=True)
class Peer:
    """label: the detector as configured at featstore's defaults (the tables' label); kind:
    what it scores ("logits" or "features"); fit_on: "train" (id/train features + labels),
    "val" (id/val logits + labels) or None."""

    label: str
    kind: str
    fit_on: str | None


PEERS: dict[str, Peer] = {
    "msp": Peer("MaxSoftmax()", "logits", None),
    "mls": Peer("MaxLogit()", "logits", None),
    "energy": Peer("EnergyBased(t=1)", "logits", None),
    "odin": Peer("MaxSoftmax(t=1000)", "logits", None),
    "gen": Peer("GEN(gamma=0.1, M=100)", "logits", None),
    "entropy": Peer("Entropy()", "logits", None),
    "temp_scaling": Peer("TemperatureScaling()", "logits", "val"),
    "kl_matching": Peer("KLMatching()", "logits", "val"),
    "vim": Peer("ViM(d=1000)", "features", "train"),
    "react": Peer("ReAct(percentile=0.9)", "features", "train"),
    "ash": Peer("ASH('ash-b', 0.9)", "features", None),
    "scale": Peer("SCALE(0.85)", "features", None),
    "dice": Peer("DICE(p=0.9)", "features", "train"),
    "gradnorm": Peer("GradNorm(fc.weight)", "features", None),
    "fdbd": Peer("fDBD()", "features", "train"),
    "nci": Peer("NCI(alpha=1e-4)", "features", "train"),
    "knn": Peer("KNN(k=50)", "features", "train"),
    "mds": Peer("Mahalanobis()", "features", "train"),
    "rmds": Peer("RMD()", "features", "train"),
    "she": Peer("SHE()", "features", "train"),
    "nnguide": Peer("NNGuide(k=100), same 1% bank", "features", "train"),
}


def vim_dim(dim: int) -> int:
    """pytorch-ood's ViM principal dimension for D features (used on both sides)."""
    return 1000 if dim >= 2048 else dim // 2


def label(name: str, dim: int) -> str:
    """The peer's table label at feature dimension `dim` (ViM's d depends on it)."""
    return f"ViM(d={vim_dim(dim)})" if name == "vim" else PEERS[name].label


Fit = Callable[[Any, Any], Any] | None
Predict = Callable[[Any], Any]


@dataclass(frozen=True)
class Built:
    """A constructed peer: the pytorch-ood detector, its fit (None: nothing to fit) and its
    predict over one scored array."""

    det: Any
    fit: Fit
    predict: Predict


def build(name: str, pod: Any, head: Any, params: Mapping[str, Any]) -> Built:
    """The pytorch-ood detector of scorer `name` at featstore parameters `params`, on the
    classifier `head` (a torch.nn.Linear holding the store's W, b): (fit, predict)."""
    if name not in PEERS:
        raise ValueError(f"no pytorch-ood peer for {name!r} (peers: {', '.join(PEERS)})")
    return _BUILDERS[name](pod, head, params)


def _logit_detector(det: Any, fit: bool = False) -> Built:
    return Built(det, det.fit_logits if fit else None, det.predict_logits)


def _feature_detector(det: Any, with_labels: bool = True) -> Built:
    fit = det.fit_features if with_labels else (lambda x, y: det.fit_features(x))
    return Built(det, fit, det.predict_features)


def _maps_4d(det: Any) -> Built:
    return Built(det, None, lambda x: det.predict_feature_maps(x[:, :, None, None]))


def _vim(pod: Any, head: Any, p: Mapping[str, Any]) -> Built:
    dim = p.get("dim") or vim_dim(head.weight.shape[1])
    return _feature_detector(pod.ViM(None, d=int(dim), w=head.weight.detach(),
                                     b=head.bias.detach()))


def _react(pod: Any, head: Any, p: Mapping[str, Any]) -> Built:
    det = pod.ReAct(backbone=None, head=head, percentile=p.get("percentile", 90) / 100.0)
    return Built(det, det.fit_feature_maps, det.predict_feature_maps)


def _dice(pod: Any, head: Any, p: Mapping[str, Any]) -> Built:
    import torch

    det = pod.DICE(None, w=head.weight.detach(), b=head.bias.detach(),
                   p=p.get("p", 90) / 100.0)
    return Built(det, det.fit_features, lambda x: torch.cat([
        det.predict_features(x[i:i + DICE_BATCH]) for i in range(0, x.shape[0], DICE_BATCH)]))


def _gradnorm(pod: Any, head: Any, p: Mapping[str, Any]) -> Built:
    det = pod.GradNorm(head, param_filter=lambda n: n == "weight")
    return Built(det, None, det.predict)


def _nnguide(pod: Any, head: Any, p: Mapping[str, Any]) -> Built:
    det = pod.NNGuide(None, head=head, k=int(p.get("K", 100)))
    rows = p["bank_rows"]
    return Built(det, lambda x, y: det.fit_features(x[rows], y[rows]), det.predict_features)


def _flat(head: Any) -> Callable[[Any], Any]:
    return lambda x: head(x.flatten(1))


_BUILDERS: dict[str, Callable[[Any, Any, Mapping[str, Any]], Built]] = {
    "msp": lambda pod, head, p: _logit_detector(pod.MaxSoftmax(None)),
    "mls": lambda pod, head, p: _logit_detector(pod.MaxLogit(None)),
    "energy": lambda pod, head, p: _logit_detector(
        pod.EnergyBased(None, t=float(p.get("temperature", 1.0)))),
    "odin": lambda pod, head, p: _logit_detector(
        pod.MaxSoftmax(None, t=float(p.get("temperature", 1000.0)))),
    "gen": lambda pod, head, p: _logit_detector(
        pod.GEN(None, gamma=p.get("gamma", 0.1), M=int(p.get("M", 100)))),
    "entropy": lambda pod, head, p: _logit_detector(pod.Entropy(None)),
    "temp_scaling": lambda pod, head, p: _logit_detector(pod.TemperatureScaling(None), True),
    "kl_matching": lambda pod, head, p: _logit_detector(pod.KLMatching(None), True),
    "vim": _vim,
    "react": _react,
    "ash": lambda pod, head, p: _maps_4d(pod.ASH(
        backbone=None, head=_flat(head), variant="ash-" + p.get("variant", "b"),
        percentile=p.get("percentile", 90) / 100.0)),
    "scale": lambda pod, head, p: _maps_4d(pod.SCALE(
        backbone=None, head=_flat(head), percentile=p.get("percentile", 85) / 100.0)),
    "dice": _dice,
    "gradnorm": _gradnorm,
    "fdbd": lambda pod, head, p: _feature_detector(pod.fDBD(None, head=head), False),
    "nci": lambda pod, head, p: _feature_detector(
        pod.NCI(None, head=head, alpha=p.get("alpha", 0.0001)), False),
    "knn": lambda pod, head, p: _feature_detector(pod.KNN(None, k=int(p.get("K", 50)))),
    "mds": lambda pod, head, p: _feature_detector(pod.Mahalanobis(None)),
    "rmds": lambda pod, head, p: _feature_detector(pod.RMD(None)),
    "she": lambda pod, head, p: _feature_detector(pod.SHE(None, head=head)),
    "nnguide": _nnguide,
}
assert set(_BUILDERS) == set(PEERS)
