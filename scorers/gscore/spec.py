"""Gscore's shared constants (package docstring); the variants, targets and ratios are
parsed by the Gscore spec, `featstore.specs.gscore` (re-exported here)."""

from __future__ import annotations

from typing import Any

from featstore.specs.gscore import (
    _AUTO,
    DEFAULT_MODELS,
    DISTANCES,
    FPR_AT_TPR,
    ID_TRAIN_FRACTION,
    MODELLINGS,
    SETS_PER_SPLIT,
    TARGETS,
    TAU_FROM,
    UDE_KERNELS,
    ModelSpec,
    _check_target,
    parse_model,
    parse_ratio,
    ratio_label,
)

from ..metrics import OOD_METRIC_NAMES

__all__ = ["DEFAULT_MODELS", "DISTANCES", "FPR_AT_TPR", "ID_TRAIN_FRACTION", "MODELLINGS",
           "SETS_PER_SPLIT", "TARGETS", "TAU_FROM", "UDE_KERNELS", "ModelSpec", "_AUTO",
           "_check_target", "parse_model", "parse_ratio", "ratio_label"]

SIGMA_FLOOR_REL = 1e-3
GMM_MAX_ITER = 10000
GMM_TOL = 1e-10
CONFIDENCE_THRESHOLD = 0.9
TAU_COARSE: tuple[float, ...] = tuple(round(0.1 * i, 2) for i in range(11))
TAU_STEP = 0.01
TAU_HALFWIDTH = 0.1
FORMAT = "featstore-gscore"
FORMAT_VERSION = 1
ID_TEST, ID_VAL, ID_TRAIN = "id/test", "id/val", "id/train"
#: Columns of the true-metric matrix of meta-sets (`metasets.set_truth`).
TRUTH_COLUMNS: tuple[str, ...] = (*OOD_METRIC_NAMES, *FPR_AT_TPR)
_METRIC_COL = {name: i for i, name in enumerate(TRUTH_COLUMNS)}
HETERO_MIN = 100
#: The Gbench protocol preset (`gbench_protocol`): the paper's four detectors (Table 1), its
#: Table 6 variants, FPR95 and AUROC, and the robustness settings of Fig. 9 / supplementary C.
GBENCH_METHODS: tuple[str, ...] = ("msp", "odin", "energy", "mls")
#: `gbench --paper`: the paper's ODIN (ref. [33]) perturbs the input, `odin_perturbed` at
#: T = 1000, eps = 0.0014 (the (T, eps) pair `GBENCH_PAPER_ODIN` the build extracts).
GBENCH_PAPER_METHODS: tuple[str, ...] = ("msp", "odin_perturbed", "energy", "mls")
GBENCH_PAPER_ODIN: tuple[tuple[float, float], ...] = ((1000.0, 0.0014),)
GBENCH_RATIOS: tuple[str, ...] = ("1:100", "1:10", "1:3", "3:1", "10:1", "100:1")
GBENCH_SIZES: tuple[int, ...] = (100, 50)
#: `--paper` / `evaluate_gscore(paper=True)`: every default that differs from the paper, set
#: to the paper's choice; option -> (value, the paper's line it comes from).
PAPER_PRESET: dict[str, tuple[Any, str]] = {
    "sets_per_split": (1, "one meta-set per OOD dataset: 'We randomly choose 150 OOD datasets "
                          "from Gbench and mix them with the meta-train IND set to construct "
                          "150 meta-train sets' (section 6.1)"),
    "gmm_tau": (_AUTO, "GMM with a searched tau: 'Note that GMM is also with a validation "
                       "process while Kmeans is not' (section 5.2; supplementary B: 0.95 at "
                       "IND:OOD 1:1)"),
    "ude_kernel": ("paper", "the UDE kernel as printed, s_p = exp(-(x - mu^val)^2 / "
                            "(2 sigma^val)) (section 5.1)"),
    "clip": (False, "the line's prediction unclipped: 'We then predict the detector "
                    "performance p on D by p = f(Gs)' (section 5.2, Testing)"),
    "corr_on": ("train", "correlations on meta-train sets: 'plot the OOD detection performance "
                         "(FPR@TPR95 and AURUC) on the 150 metatrain sets against their "
                         "Gscores' (section 6.2, Fig. 3)"),
    "tau_halfwidth": (0.5, "the tau refinement from tau - 0.5 to tau + 0.5 at step 0.01: "
                           "'we can repeat the process from tau - 0.5 to tau + 0.5 to choose a "
                           "finer tau with an interval of 0.01' (section 5.2, Validation)"),
    "kmeans": ("lloyd", "Kmeans by Lloyd's algorithm from two random centroids (two random "
                        "samples of the set, seeded by --seed): 'Kmeans starts with two random "
                        "centroids and iteratively updates the centroids' (section 5.1)"),
}
#: What `--paper` does NOT match, and why (the guide lists them beside PAPER_PRESET).
PAPER_UNMATCHED: dict[str, str] = {
    "id_pools": "the paper's meta-train IND set is a fifth of CIFAR-10's train set held out of "
                "the backbone's training (section 6.1); a store's id/train rows trained the "
                "model, so meta-train ID rows come from a disjoint part of id/test (unseen by "
                "the model, as the paper's fifth is)",
}


# =============================================================================== kernels
