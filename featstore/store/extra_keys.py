"""Names of the `extra/<name>` arrays of a split (DESIGN §2), shared by extraction and scorers.

Torch-free (scorers import it). Every extra is row-aligned with the split; `mc_logits` has its
rows on axis 1, every other extra on axis 0.

    confidence               (N,)          ConfBranch confidence c = sigmoid(confidence_head)
    godin_h                  (N, C)        G-ODIN h (equal to the stored logits)
    godin_g                  (N,)          G-ODIN g in (0, 1)
    head2_logits             (N, C)        MCD second head
    mc_logits                (T, N, C)     T stochastic passes with dropout on (row axis 1)
    odin_logits/<T>_<eps>    (N, C)        logits of the ODIN-perturbed input at (T, eps)
    feature_maps             (N, Cmap, H, W)  input of the global pooling before the head
    layer_features/<L>       (N, C_L)      global average pool of module L's output
    layer_featurenorm/<L>    (N,)          (1/C_L) sum_c ||relu(F_c)||_2 of module L's output
    layer_gram/<L>           (N, P, C_L)   Gram row sums of module L's output, powers 1..P
    adascale_features/<o>    (N, D)        penultimate features of the AdaSCALE-perturbed input
                                           (fraction o of the pixels moved)

`<L>` is a module name as `named_modules()` gives it (`layer4.0`): it holds no `/`.
"""

from __future__ import annotations

import math

from featstore.errors import UsageError

CONFIDENCE = "confidence"
GODIN_H = "godin_h"
GODIN_G = "godin_g"
HEAD2_LOGITS = "head2_logits"
MC_LOGITS = "mc_logits"
ODIN_GROUP = "odin_logits"
FEATURE_MAPS = "feature_maps"
LAYER_FEATURES = "layer_features"
LAYER_FEATURENORM = "layer_featurenorm"
LAYER_GRAM = "layer_gram"
ADASCALE_GROUP = "adascale_features"
LAYER_GROUPS = (LAYER_FEATURES, LAYER_FEATURENORM, LAYER_GRAM)
ROW_AXES = {MC_LOGITS: 1}


def _num(value: float) -> str:
    return format(float(value), ".10g")


def odin_name(temperature: float, epsilon: float) -> str:
    """`odin_logits/<T>_<eps>`, numbers in shortest %g form (1000, 0.0014, 1e-05)."""
    return f"{ODIN_GROUP}/{_num(temperature)}_{_num(epsilon)}"


def parse_odin_name(name: str) -> tuple[float, float] | None:
    """(T, eps) of an `odin_logits/<T>_<eps>` extra name, None for other names."""
    prefix = ODIN_GROUP + "/"
    if not name.startswith(prefix):
        return None
    t_text, sep, eps_text = name[len(prefix):].partition("_")
    try:
        return (float(t_text), float(eps_text)) if sep else None
    except ValueError:
        return None


def parse_odin_grid(text: str) -> list[tuple[float, float]]:
    """`"1000:0.0014,0.0028;1:0"` -> [(1000, 0.0014), (1000, 0.0028), (1, 0)].

    Groups `T:eps[,eps...]` separated by `;` (or whitespace); T > 0, eps >= 0, finite.
    Duplicates are dropped; order is kept."""
    pairs: list[tuple[float, float]] = []
    groups = [g for g in text.replace(";", " ").split() if g]
    if not groups:
        raise UsageError(f"--odin-grid {text!r}: expected 'T:eps[,eps...][;T:eps...]', "
                         "e.g. '1000:0.0014,0.0028'")
    for group in groups:
        t_text, sep, eps_text = group.partition(":")
        try:
            temp = float(t_text)
            eps_list = [float(e) for e in eps_text.split(",") if e]
        except ValueError:
            raise UsageError(f"--odin-grid {text!r}: {group!r} is not T:eps[,eps...] with "
                             "numbers") from None
        if not sep or not eps_list:
            raise UsageError(f"--odin-grid {text!r}: {group!r} names no eps (expected "
                             "T:eps[,eps...])")
        if not math.isfinite(temp) or temp <= 0:
            raise UsageError(f"--odin-grid {text!r}: temperature {t_text!r} must be > 0")
        for eps in eps_list:
            if not math.isfinite(eps) or eps < 0:
                raise UsageError(f"--odin-grid {text!r}: eps {eps!r} must be >= 0")
            if (temp, eps) not in pairs:
                pairs.append((temp, eps))
    return pairs


def layer_name(group: str, layer: str) -> str:
    """`<group>/<layer>`, e.g. `layer_features/layer4.0`."""
    return f"{group}/{layer}"


def stored_layers(names: list[str], group: str) -> list[str]:
    """The layers of `group` among extra names, in name order."""
    prefix = group + "/"
    return sorted(n[len(prefix):] for n in names if n.startswith(prefix))


def parse_feature_layers(text: str) -> tuple[str, ...]:
    """`"layer1,layer2.0"` -> ("layer1", "layer2.0"): module names, no `/`, no repeats."""
    names = [n.strip() for n in text.split(",")]
    if not names or any(not n for n in names):
        raise UsageError(f"--feature-layers {text!r}: expected module names separated by "
                         "commas, e.g. 'layer1,layer2,layer3'")
    bad = next((n for n in names if "/" in n), None)
    if bad is not None:
        raise UsageError(f"--feature-layers {text!r}: {bad!r} is not a module name (no '/')")
    if len(set(names)) != len(names):
        raise UsageError(f"--feature-layers {text!r}: a module is named twice")
    return tuple(names)


def adascale_name(fraction: float) -> str:
    """`adascale_features/<o>`, o in shortest %g form (0.05)."""
    return f"{ADASCALE_GROUP}/{_num(fraction)}"


def parse_adascale_name(name: str) -> float | None:
    """o of an `adascale_features/<o>` extra name, None for other names."""
    prefix = ADASCALE_GROUP + "/"
    if not name.startswith(prefix):
        return None
    try:
        return float(name[len(prefix):])
    except ValueError:
        return None


def parse_adascale_fractions(text: str) -> tuple[float, ...]:
    """`"0.05,0.1"` -> (0.05, 0.1): fractions 0 < o < 1 of the input's entries that
    AdaSCALE's perturbation moves; duplicates dropped, order kept."""
    out: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = float(part)
        except ValueError:
            raise UsageError(f"--adascale-o {text!r}: {part!r} is not a number (expected "
                             "fractions in (0, 1), e.g. '0.05')") from None
        if not math.isfinite(value) or not 0.0 < value < 1.0:
            raise UsageError(f"--adascale-o {text!r}: {part!r} must be in (0, 1)")
        if value not in out:
            out.append(value)
    return tuple(out)


def view_options(opts: dict) -> dict:
    """An experiment row's `extract` table with the view options as ExtractOptions takes
    them: `feature_layers` "a,b" or ["a", "b"] -> ("a", "b"); `adascale_o` 0.05, "0.05,0.1"
    or [0.05] -> (0.05, ...); each checked as on the command line."""
    out = dict(opts)
    layers = out.get("feature_layers")
    if layers is not None and not isinstance(layers, tuple):
        text = layers if isinstance(layers, str) else ",".join(str(n) for n in layers)
        out["feature_layers"] = parse_feature_layers(text)
    fractions = out.get("adascale_o")
    if fractions is not None and not isinstance(fractions, tuple):
        items = fractions if isinstance(fractions, list) else [fractions]
        out["adascale_o"] = parse_adascale_fractions(",".join(str(o) for o in items))
    return out
