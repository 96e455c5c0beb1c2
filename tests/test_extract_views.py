"""The `--feature-layers` (+ `--gram-powers`) and `--adascale-o` views (DESIGN §2;
featstore/extraction/layer_views.py, extract_extras.py) against a bare torch loop with forward
hooks on a real small model: the pooled outputs, FeatureNorm as the authors' `normratio.py`
computes it, the Gram row sums as OpenOOD v1.5 `gram_postprocessor.py` `G_p` (at 3c35632)
computes them, AdaSCALE's perturbed features as OpenOOD's `adascale_postprocessor.py` `perturb`
makes them; the CLI flags, bad names, and a store without the views."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from PIL import Image

from cli.app import main
from featstore import Store
from featstore.errors import UsageError
from featstore.extraction.datasets import build_transform
from featstore.extraction.extract import ExtractOptions, extract
from featstore.store.extra_keys import (
    parse_adascale_fractions,
    parse_feature_layers,
    view_options,
)
from tests.helpers import tiny_models
from tests.helpers.images import TRANSFORM, make_image_tree, write_spec

OPTS = dict(device="cpu", batch_size=8, num_workers=0, part_batches=2)
MODEL = "tests.helpers.tiny_models:tiny_blocks"


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


@pytest.fixture
def spec(tmp_path):
    tree = make_image_tree(tmp_path / "images")
    return write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')])


def images(root: Path) -> torch.Tensor:
    tf = build_transform(TRANSFORM)
    return torch.stack([tf(Image.open(p).convert("RGB"))
                        for p in sorted((root.parent / "images").rglob("*.png"))])


def openood_gram(feature: torch.Tensor, p: int) -> torch.Tensor:
    """OpenOOD `G_p`, transcribed (gram_postprocessor.py at 3c35632)."""
    temp = feature.detach() ** p
    temp = temp.reshape(temp.shape[0], temp.shape[1], -1)
    temp = (torch.matmul(temp, temp.transpose(dim0=2, dim1=1))).sum(dim=2)
    return (temp.sign() * torch.abs(temp) ** (1 / p)).reshape(temp.shape[0], -1)


def openood_perturb(data: torch.Tensor, grad: torch.Tensor, o: float) -> torch.Tensor:
    """OpenOOD AdaScalePostprocessor.perturb, transcribed (adascale_postprocessor.py at
    3c35632)."""
    batch_size, channels, height, width = data.shape
    n_pixels = int(channels * height * width * o)
    abs_grad = abs(grad).view(batch_size, channels * height * width)
    _, topk_indices = torch.topk(abs_grad, n_pixels, dim=1, largest=False)
    mask = torch.zeros_like(abs_grad, dtype=torch.uint8)
    mask.scatter_(1, topk_indices, 1)
    mask = mask.view(batch_size, channels, height, width)
    return data + grad.sign() * mask * 0.5


def reference(x_all: torch.Tensor, fractions: tuple[float, ...]) -> dict[str, np.ndarray]:
    """A bare loop over the extraction's batches of 8, forward hooks on the two blocks."""
    model = tiny_models.TinyBlocks().eval()
    seen: dict[str, torch.Tensor] = {}
    handles = [getattr(model, n).register_forward_hook(
        lambda m, i, o, n=n: seen.__setitem__(n, o.detach().double())) for n in ("block1",
                                                                                 "block2")]
    feats: list[torch.Tensor] = []
    model.fc.register_forward_hook(lambda m, i, o: feats.append(i[0].detach()))
    out: dict[str, list] = {}
    for start in range(0, len(x_all), 8):
        x = x_all[start:start + 8]
        with torch.no_grad():
            model(x)
        for n, f in seen.items():
            out.setdefault(f"layer_features/{n}", []).append(f.mean((2, 3)))
            out.setdefault(f"layer_featurenorm/{n}", []).append(
                torch.norm(F.relu(f), dim=[2, 3], p=2).mean(dim=1))
            out.setdefault(f"layer_gram/{n}", []).append(
                torch.stack([openood_gram(f, p) for p in (1, 2, 3)], dim=1))
        data = x.clone().requires_grad_(True)
        output = model(data)
        labels = output.detach().argmax(dim=1)
        output[torch.arange(len(labels)), labels].backward(torch.ones_like(labels))
        for o in fractions:
            feats.clear()
            with torch.no_grad():
                model(openood_perturb(data.detach(), data.grad.detach(), o))
            out.setdefault(f"adascale_features/{o:g}", []).append(feats[0])
    for h in handles:
        h.remove()
    return {k: torch.cat(v).numpy() for k, v in out.items()}


def test_views_equal_a_bare_torch_loop(tmp_path, spec):
    st = extract(MODEL, spec, tmp_path / "s", options=ExtractOptions(
        **OPTS, feature_layers=("block1", "block2"), gram_powers=3, adascale_o=(0.05, 0.3),
        feature_maps=True))   # with the feature-map search's dry pass on the first batch
    sp = st.split("id/test")
    want = reference(images(spec), (0.05, 0.3))
    assert sorted(sp.extra_names()) == sorted([*want, "feature_maps"])
    for name, ref in want.items():
        got = np.asarray(sp.extra(name))
        assert got.dtype == np.float32 and got.shape == ref.shape, name
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max(),
                                   err_msg=name)
    assert not np.allclose(sp.extra("adascale_features/0.3"), sp.features)   # it moved
    entry = st.manifest["splits"]["id/test"]
    assert entry["feature_layers"] == ["block1", "block2"] and entry["gram_powers"] == 3
    assert entry["extras"]["layer_gram/block2"] == [18, 3, 8]
    assert entry["adascale_step"] == 0.5


def test_bad_views_are_one_line_errors(tmp_path, spec):
    for layers, match in [(("nope",), "no module 'nope'"),
                          (("act",), "'act' is called 2 times")]:
        with pytest.raises(UsageError, match=match):
            extract(MODEL, spec, tmp_path / "bad", options=ExtractOptions(
                **OPTS, feature_layers=layers, overwrite=True))
    with pytest.raises(UsageError, match="--gram-powers: name the modules"):
        extract(MODEL, spec, tmp_path / "bad", options=ExtractOptions(**OPTS, gram_powers=2,
                                                                      overwrite=True))
    for text, match in [("a,,b", "module names"), ("a/b", "not a module name"),
                        ("a,a", "named twice")]:
        with pytest.raises(UsageError, match=match):
            parse_feature_layers(text)
    for text, match in [("x", "not a number"), ("0", r"\(0, 1\)"), ("1.5", r"\(0, 1\)")]:
        with pytest.raises(UsageError, match=match):
            parse_adascale_fractions(text)
    # an experiment row's `extract` table (TOML strings, lists, a number) as ExtractOptions
    assert view_options({"feature_layers": ["a", "b"], "adascale_o": 0.05, "gram_powers": 5}) \
        == {"feature_layers": ("a", "b"), "adascale_o": (0.05,), "gram_powers": 5}
    assert view_options({"feature_layers": "a,b", "adascale_o": [0.05, 0.1]}) == {
        "feature_layers": ("a", "b"), "adascale_o": (0.05, 0.1)}


def test_cli_flags_and_eval_names_the_missing_view(tmp_path, spec, capsys):
    def run(*args: str) -> int:
        try:
            main(list(args))
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    assert run("extract", "--help") == 0
    helptext = " ".join(capsys.readouterr().out.split())
    for flag in ("--feature-layers", "--gram-powers", "--adascale-o"):
        assert flag in helptext
    out = tmp_path / "s"
    assert run("extract", "--model", MODEL, "--spec", str(spec), "--out", str(out),
               "--device", "cpu", "--workers", "0", "--quiet", "--feature-layers", "block2",
               "--adascale-o", "0.05") == 0, capsys.readouterr().err
    capsys.readouterr()
    assert run("info", str(out)) == 0
    assert "layer_features/block2" in capsys.readouterr().out
    assert Store.open(out).split("id/test").extra_names() == [
        "adascale_features/0.05", "layer_featurenorm/block2", "layer_features/block2"]


def test_eval_skips_the_view_scorers_naming_the_command(tmp_path):
    """A store without the views (today's format) is read as ever; `eval --all`'s walk
    (scorers.evaluate, strict=False, in the CLI's wording) skips each new scorer with the
    `featstore extract` flag that writes its view."""
    from cli.wording import CLI_WORDING
    from featstore.errors import use_wording
    from scorers.evaluate import evaluate
    from scorers.testing.stores import plain_arrays

    arrays = plain_arrays(n_train=60, n_val=30, n_test=30, n_ood=30)
    st = Store.from_arrays(tmp_path / "plain", head=arrays["head"], splits=arrays["splits"])
    names = ["featurenorm", "mds_ensemble", "gram", "adascale_a", "adascale_l"]
    with use_wording(CLI_WORDING):
        result = evaluate(st, [*names, "msp"], use_cache=False)
        oodl = evaluate(st, ["oodl", "msp"], use_cache=False,
                        params={"oodl": {"layer": "block2"}})
    skipped = {**result["skipped"], **oodl["skipped"]}
    assert sorted(skipped) == sorted([*names, "oodl"])
    for name in ("featurenorm", "mds_ensemble", "oodl"):
        assert "featstore extract --feature-layers" in skipped[name], skipped[name]
    assert "--feature-layers NAME[,NAME...] --gram-powers 5" in skipped["gram"]
    for name in ("adascale_a", "adascale_l"):
        assert "featstore extract --adascale-o 0.05" in skipped[name], skipped[name]
