"""A store holding the `--feature-layers` and `--adascale-o` views (DESIGN §2), built from
random feature maps of two layers by NumPy transcriptions of featstore/extraction/
layer_views.py's formulas (the extraction itself is checked against torch in
tests/test_extract_views.py), for the reference tests of mds_ensemble, gram, featurenorm,
oodl's `layer` and adascale_a / adascale_l."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from featstore import Store

LAYERS = ("l1", "l2")
POWERS = 3
ADASCALE_O = 0.05
SPLITS = (("id/train", 120), ("id/val", 60), ("id/test", 40), ("ood/far/x", 40))


def gram_rows(f: np.ndarray, powers: int) -> np.ndarray:
    """(n, C, S) maps -> (n, P, C): sign(r) |r|^(1/p), r = rowsum(F^p (F^p)^T)."""
    out = []
    for p in range(1, powers + 1):
        fp = f ** p
        r = np.einsum("ncs,nds->ncd", fp, fp).sum(axis=2)
        out.append(np.sign(r) * np.abs(r) ** (1.0 / p))
    return np.stack(out, axis=1)


def maps_of(rng: np.random.Generator, y: np.ndarray | None, n: int) -> dict[str, np.ndarray]:
    """Layer maps: l1 (n, 6, 3, 3), l2 (n, 100, 2, 2); ID rows shifted by their class, OOD rows
    by a common offset and more spread."""
    out = {}
    for name, (c, s) in (("l1", (6, 9)), ("l2", (100, 4))):
        base = (1.5 * (np.arange(c)[None, :] % 4 == y[:, None]) if y is not None
                else np.full((n, c), 0.6))
        noise = rng.normal(0.0, 0.5 if y is not None else 1.2, (n, c, s))
        out[name] = base[:, :, None] + noise
    return out


def view_arrays(seed: int = 0) -> dict[str, Any]:
    """head (W, b) and splits with features (l2's pool), labels, and every view."""
    rng = np.random.default_rng(seed)
    weight = rng.normal(0.0, 0.3, (4, 100)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, 4).astype(np.float32)
    splits: dict[str, dict[str, Any]] = {}
    for name, n in SPLITS:
        y = np.arange(n) % 4 if name.startswith("id/") else None
        maps = maps_of(rng, y, n)
        extras: dict[str, np.ndarray] = {}
        for layer, f in maps.items():
            extras[f"layer_features/{layer}"] = f.mean(axis=2)
            extras[f"layer_featurenorm/{layer}"] = np.sqrt(
                (np.maximum(f, 0.0) ** 2).sum(axis=2)).mean(axis=1)
            extras[f"layer_gram/{layer}"] = gram_rows(f, POWERS)
        feats = np.maximum(maps["l2"].mean(axis=2), 0.0) + rng.uniform(0, 1e-3, (n, 100))
        moved = feats + np.abs(rng.normal(0.0, 0.05 if y is not None else 0.4, (n, 100)))
        extras[f"adascale_features/{ADASCALE_O:g}"] = moved
        splits[name] = {"features": feats.astype(np.float32),
                        "extras": {k: v.astype(np.float32) for k, v in extras.items()},
                        "maps": maps}
        if y is not None:
            splits[name]["labels"] = y
    return {"head": (weight, bias), "splits": splits}


def view_store(path: Path, seed: int = 0) -> tuple[Store, dict[str, Any]]:
    """The arrays written as a real HDF5 store (logits = the head's output), and the arrays."""
    arrays = view_arrays(seed)
    splits = {k: {f: v for f, v in s.items() if f != "maps"}
              for k, s in arrays["splits"].items()}
    return Store.from_arrays(path, head=arrays["head"], splits=splits), arrays


def openood_adascale(val_h: np.ndarray, val_moved: np.ndarray, h: np.ndarray,
                     moved: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                     percentile: tuple[float, float], k1: float, k2: float, lmbda: float,
                     logit_scaling: bool) -> np.ndarray:
    """OpenOOD v1.5's AdaSCALE score on given arrays, transcribed (float64 torch) from
    `openood/postprocessors/adascale_postprocessor.py` (`set_hyperparam`, `get_percentile`,
    `postprocess`) and `openood/networks/adascale_net.py` (`forward_threshold`, `ada_scale`)
    at 3c35632; statsmodels' ECDF(x)(t) = #{x_i <= t} / n (side "right") in its place."""
    import torch

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(np.asarray(a, dtype=np.float64))

    feature_log, feature_perturbed_log = t(val_h), t(val_moved)
    feature_shift_log = abs(feature_log - feature_perturbed_log)
    feature_dim = feature_log.shape[1]
    k1_, k2_ = int(feature_dim * k1 / 100), int(feature_dim * k2 / 100)

    def stat(feature, feature_perturbed, feature_shift):
        topk_indices = torch.topk(feature, dim=1, k=k1_)[1]
        topk_feature_perturbed = torch.gather(torch.relu(feature_perturbed), 1, topk_indices)
        topk_indices = torch.topk(feature, dim=1, k=k2_)[1]
        topk_feature_shift = torch.gather(feature_shift, 1, topk_indices)
        return topk_feature_perturbed.sum(dim=1) + lmbda * topk_feature_shift.sum(dim=1)

    sum_log = np.sort(stat(feature_log, feature_perturbed_log, feature_shift_log).numpy())

    def ecdf(x: np.ndarray) -> np.ndarray:
        return np.searchsorted(sum_log, x, side="right") / len(sum_log)

    feature, feature_perturbed = t(h), t(moved)
    topk_norm = stat(feature, feature_perturbed, abs(feature - feature_perturbed))
    percent = 1 - ecdf(topk_norm.numpy())
    percentiles = torch.from_numpy(percentile[0] + percent * (percentile[1] - percentile[0]))
    x = torch.relu(feature)
    n = x.shape[1:].numel()
    ks = n - torch.round(n * percentiles / 100.0).to(torch.int)
    max_k = ks.max()
    values, _ = torch.topk(x, int(max_k), dim=1)
    mask = torch.arange(int(max_k))[None, :] < ks[:, None]
    scale = x.sum(dim=1, keepdim=True) / (values * mask).sum(dim=1, keepdim=True)
    fc = torch.nn.Linear(feature_dim, weight.shape[0]).double()
    with torch.no_grad():
        fc.weight.copy_(t(weight))
        fc.bias.copy_(t(bias))
        if logit_scaling:
            logits_cls = fc(feature) * scale ** 2.0
        else:
            logits_cls = fc(feature * torch.exp(scale))
        return torch.logsumexp(logits_cls, dim=1).numpy()


def numpy_adascale(val_h: np.ndarray, val_moved: np.ndarray, h: np.ndarray, moved: np.ndarray,
                   weight: np.ndarray, bias: np.ndarray, percentile: tuple[float, float],
                   k1: float, k2: float, lmbda: float, logit_scaling: bool) -> np.ndarray:
    """The paper's formula row by row in plain NumPy / Python (Regmi 2025, eqs. of Q', p, s)."""
    d = h.shape[1]
    k1_, k2_ = int(d * k1 / 100), int(d * k2 / 100)

    def q(row: np.ndarray, row_moved: np.ndarray) -> float:
        order = sorted(range(d), key=lambda j: -row[j])
        return (sum(max(row_moved[j], 0.0) for j in order[:k1_])
                + lmbda * sum(abs(row[j] - row_moved[j]) for j in order[:k2_]))

    fitted = [q(a, b) for a, b in zip(val_h.astype(float), val_moved.astype(float), strict=True)]
    out = []
    for row, row_moved in zip(h.astype(float), moved.astype(float), strict=True):
        ecdf = sum(v <= q(row, row_moved) for v in fitted) / len(fitted)
        p = percentile[0] + (1 - ecdf) * (percentile[1] - percentile[0])
        x = sorted(np.maximum(row, 0.0), reverse=True)
        k = max(d - int(np.rint(d * p / 100)), 1)
        s = sum(x) / sum(x[:k])
        z = (row * np.exp(s)) @ weight.T.astype(float) + bias if not logit_scaling \
            else (row @ weight.T.astype(float) + bias) * s ** 2
        out.append(float(np.log(np.sum(np.exp(z - z.max()))) + z.max()))
    return np.asarray(out)


def check_adascale_against_references(tmp_path: Path, name: str, params: dict,
                                      logit_scaling: bool) -> None:
    """`name` (adascale_a: logit_scaling False, adascale_l: True) fitted on `view_store`
    scores id/test and ood/far/x as OpenOOD's computation and the NumPy formula do (rtol 1e-9),
    on the scorer's own id/val sample."""
    from scorers import get_scorer

    st, _ = view_store(tmp_path / "s")
    s = get_scorer(name, **params).fit(st)
    p = s.params
    val = st.split("id/val")
    view = f"adascale_features/{ADASCALE_O:g}"
    val_h = np.asarray(val.features)[s.sample]
    val_moved = np.asarray(val.extra(view))[s.sample]
    weight, bias = st.head
    lo, hi = (float(v) for v in p["percentile"].split(":"))
    for split in ("id/test", "ood/far/x"):
        sp = st.split(split)
        args = (val_h, val_moved, np.asarray(sp.features), np.asarray(sp.extra(view)), weight,
                bias, (lo, hi), p["k1"], p["k2"], p["lmbda"], logit_scaling)
        got = s.score(sp)
        np.testing.assert_allclose(got, openood_adascale(*args), rtol=1e-9)
        np.testing.assert_allclose(got, numpy_adascale(*args), rtol=1e-9)


def check_adascale_grid_and_bad_inputs(tmp_path: Path, name: str) -> None:
    """`name`'s percentile x lambda grid equals separate fits bit for bit; a reversed
    percentile pair and an o without a stored view are refused with their one-line errors."""
    import pytest

    from featstore.errors import FeatstoreError, UsageError
    from scorers import get_scorer

    st, _ = view_store(tmp_path / "s")
    s = get_scorer(name).fit(st)
    sp = st.split("ood/far/x")
    grid = s.score_grid(sp, {"percentile": ["60:65", "90:99"], "lmbda": [1.0, 10.0]})
    assert len(grid) == 4
    for setting, scores in grid:
        np.testing.assert_array_equal(scores, get_scorer(name, **setting).fit(st).score(sp))
    with pytest.raises(UsageError, match="percentile='85:75' must be 'p_min:p_max'"):
        get_scorer(name, percentile="85:75")
    with pytest.raises(FeatstoreError, match=r"no AdaSCALE view at o=0.1 \(stored o: 0.05\)"):
        get_scorer(name, o=0.1).fit(st)
