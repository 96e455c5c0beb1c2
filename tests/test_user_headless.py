"""Stores without a classifier head (issue 29, items 6 and 1): `featstore import` and
`Store.from_arrays` with features + logits and no (W, b); the scorers that need the head skip
with the reason, the others score the given logits/features. References: NumPy
transcriptions (log max softmax, the k-th nearest neighbour's cosine similarity)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import softmax

from featstore import Store
from featstore.errors import InputError, NoHeadError, UsageError
from featstore.extraction.importer import import_arrays
from scorers import get_scorer
from tests.helpers.cli import run_cli as run


def arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    flat: dict[str, np.ndarray] = {}
    for name, n, shift in (("id/train", 120, 0.0), ("id/test", 40, 0.0),
                           ("ood/far/x", 30, 1.5)):
        y = rng.integers(0, 4, n)
        f = rng.normal(size=(n, 12)).astype(np.float32) + shift
        f[:, :4] += 3 * np.eye(4)[y]
        flat[f"{name}/features"] = f
        flat[f"{name}/logits"] = (2 * f[:, :4] + rng.normal(size=(n, 4))).astype(np.float32)
        if name.startswith("id/"):
            flat[f"{name}/labels"] = y
    return flat


def test_import_without_a_head(tmp_path, capsys):
    flat = arrays()
    np.savez(tmp_path / "a.npz", **flat)
    st = import_arrays(tmp_path / "a.npz", tmp_path / "st")
    assert not st.has_head and st.manifest["num_classes"] == 4
    assert st.manifest["feature_dim"] == 12
    with pytest.raises(NoHeadError, match="has no classifier head"):
        st.head  # noqa: B018
    np.testing.assert_array_equal(np.asarray(st.split("ood/far/x").logits),
                                  flat["ood/far/x/logits"])
    # msp scores log max softmax (papers2); the probability itself is exp(score)
    lg = flat["ood/far/x/logits"].astype(np.float64)
    np.testing.assert_allclose(np.exp(get_scorer("msp").fit(st).score(st.split("ood/far/x"))),
                               softmax(lg, axis=1).max(1), rtol=1e-12)
    rest = np.sort(np.exp(lg - lg.max(1, keepdims=True)), axis=1)[:, :-1].sum(1)
    want = -np.log1p(rest)                     # log max softmax, no cancellation near 0
    got = get_scorer("msp").fit(st).score(st.split("ood/far/x"))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    bank = flat["id/train/features"] / np.linalg.norm(flat["id/train/features"], axis=1,
                                                      keepdims=True)
    q = flat["ood/far/x/features"] / np.linalg.norm(flat["ood/far/x/features"], axis=1,
                                                    keepdims=True)
    kth = -np.sort(-(q.astype(np.float64) @ bank.T.astype(np.float64)), axis=1)[:, 4]
    got = get_scorer("knn", K=5).fit(st).score(st.split("ood/far/x"))
    np.testing.assert_allclose(got, -np.sqrt(np.maximum(2 - 2 * kth, 0)), atol=1e-5)
    code, stdout, err = run(capsys, "eval", str(tmp_path / "st"), "--all", "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert "msp" in doc["methods"] and "vim" not in doc["methods"]
    assert "has no classifier head" in doc["skipped"]["vim"]
    assert "needs the classifier head (W, b)" in doc["skipped"]["react"]
    code, _, err = run(capsys, "score", str(tmp_path / "st"), "--method", "vim")
    assert code == 1 and "has no classifier head" in err and len(err.strip().splitlines()) == 1
    code, stdout, _ = run(capsys, "info", str(tmp_path / "st"))
    assert code == 0 and "no head (W, b)" in stdout


def test_headless_bad_inputs(tmp_path):
    flat = arrays()
    np.savez(tmp_path / "w.npz", **flat, **{"head/weight": np.zeros((4, 12), np.float32)})
    with pytest.raises(InputError, match="'head/weight' without 'head/bias'; give both"):
        import_arrays(tmp_path / "w.npz", tmp_path / "a")
    no_logits = {k: v for k, v in flat.items() if k != "id/test/logits"}
    np.savez(tmp_path / "n.npz", **no_logits)
    with pytest.raises(InputError, match="split 'id/test': no logits; a store without a head"):
        import_arrays(tmp_path / "n.npz", tmp_path / "b")
    assert not (tmp_path / "b" / "store.json").exists()
    with pytest.raises(UsageError, match=r"\(N, C=4\), got \(40, 12\) and \(40, 3\)"):
        Store.from_arrays(tmp_path / "c", head=None, splits={
            "id/train": {"features": flat["id/train/features"],
                         "logits": flat["id/train/logits"]},
            "id/test": {"features": flat["id/test/features"],
                        "logits": flat["id/test/logits"][:, :3]}})


def test_torchscript_no_head_is_a_clear_error(tmp_path):
    """A TorchScript model cannot be hooked: `--no-head` is refused in one line naming the
    file and the way out; `--feature-layer` names the scripted Linear used as the head."""
    import torch

    from featstore.extraction.models import load_model
    from tests.helpers.tiny_models import TinyCNN

    path = tmp_path / "tiny.ts"
    torch.jit.script(TinyCNN().eval()).save(str(path))
    with pytest.raises(UsageError, match=r"^--no-head: not supported for the TorchScript model "
                                         r".*tiny\.ts.*module:callable instead$"):
        load_model(str(path), no_head=True)
    with pytest.raises(UsageError, match=r"--feature-layer 'nope': not a Linear of the "
                                         r"TorchScript model \(Linear layers: fc\)"):
        load_model(str(path), feature_layer="nope")
