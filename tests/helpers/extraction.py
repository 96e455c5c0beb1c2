"""Small stores extracted for real with the tiny CNN of tests/helpers/tiny_models.py."""

from __future__ import annotations

from pathlib import Path

from featstore.extraction.extract import ExtractOptions, extract

TRANSFORM = ("[transform]\nresize = 16\ncrop = 16\nmean = [0.5, 0.5, 0.5]\n"
             "std = [0.25, 0.25, 0.25]\n")


OPTS = ExtractOptions(device="cpu", batch_size=8, num_workers=0, part_batches=2,
                      progress=False)


def extract_small(tmp_path: Path, names: list[str], count: int = 20) -> Path:
    """Extract an id/test noise split and `ood/far/<name>` noise splits with the tiny CNN into
    tmp_path/out (extract refuses a spec without an id/ split into a store without one)."""
    spec = TRANSFORM + (f'\n[[split]]\nname = "id/test"\nsource = {{ builtin = "noise", '
                        f"count = {count}, seed = 99 }}\n") + "".join(
        f'\n[[split]]\nname = "ood/far/{n}"\nsource = {{ builtin = "noise", count = {count}, '
        f"seed = {i} }}\n" for i, n in enumerate(names))
    (tmp_path / "spec.toml").write_text(spec)
    extract("tests.helpers.tiny_models:tiny_cnn", tmp_path / "spec.toml", tmp_path / "out",
            options=OPTS)
    return tmp_path / "out"
