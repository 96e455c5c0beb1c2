"""The demo, end to end on real bundled data: write the benchmark spec, train the small ResNet
on digits 0-5 (cached as model.pt in the output directory), extract every split into a store.

ID: digits 0-5 (train / val / test, stratified, seed 0). OOD, each with a val and a test part:
held-out digits 6-9 (`ood/near`), photographs, textures, faces and noise (`ood/far`). CSID:
ID test digits rotated 30 degrees and blurred (`csid/...`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..datasets import TransformedRows, build_transform, rows_from_source
from ..extract import ExtractOptions, Progress, extract
from ..spec import load_spec
from ..store import Store
from ..training.ce import TrainConfig, random_shift, train_ce
from .model import demo_resnet

ID_CLASSES = [0, 1, 2, 3, 4, 5]
MODEL_SPEC = "featstore.demo.model:demo_resnet"
PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry"]
TEXTURES = ["brick", "grass", "gravel"]
_OOD_FRACTIONS = {"val": 0.3, "test": 0.7}
SPEC_TEMPLATE = f"""# featstore demo benchmark: real bundled data, generated offline.
classes = ["0", "1", "2", "3", "4", "5"]

[transform]
resize = 32
crop = 32
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]

[[split]]
name = "id/train"
source = {{ builtin = "digits", classes = {ID_CLASSES}, part = "train" }}

[[split]]
name = "id/val"
source = {{ builtin = "digits", classes = {ID_CLASSES}, part = "val" }}

[[split]]
name = "id/test"
source = {{ builtin = "digits", classes = {ID_CLASSES}, part = "test" }}

[[split]]
name = "csid/rotate30"
source = {{ builtin = "digits", classes = {ID_CLASSES}, part = "test", rotate = 30 }}

[[split]]
name = "csid/blur1"
source = {{ builtin = "digits", classes = {ID_CLASSES}, part = "test", blur = 1.0 }}
"""

_OOD_SPLITS: list[tuple[str, str, dict]] = [
    ("near", "digits6to9", {"builtin": "digits", "classes": [6, 7, 8, 9],
                            "fractions": _OOD_FRACTIONS}),
    ("far", "photos", {"builtin": "patches", "images": PHOTOS, "count": 40}),
    ("far", "textures", {"builtin": "patches", "images": TEXTURES, "count": 80}),
    ("far", "faces", {"builtin": "faces", "fractions": _OOD_FRACTIONS}),
    ("far", "noise", {"builtin": "noise", "kind": "gaussian", "count": 200}),
]


def toml_value(value: object) -> str:
    """A TOML literal for the plain values a spec holds (str, number, bool, list, dict)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML literal for {type(value).__name__}")


def demo_spec_text() -> str:
    """The demo's benchmark spec (TOML); val parts are flagged `usage = "val"`."""
    text = SPEC_TEMPLATE
    for group, name, source in _OOD_SPLITS:
        for part in ("val", "test"):
            split = f"ood/{group}/{name}" + ("_val" if part == "val" else "")
            src = toml_value({**source, "part": part})
            text += f'\n[[split]]\nname = "{split}"\nusage = "{part}"\nsource = {src}\n'
    return text


def train_demo_model(spec_path: Path, out_file: Path, epochs: int = 12,
                     log: Callable[[str], None] = print,
                     progress: Progress | None = None) -> dict:
    """Train the demo ResNet on id/train of the spec and save its state dict atomically;
    `progress(name, done, total)` (optional) is told each finished epoch."""
    spec = load_spec(spec_path)
    train = next(s for s in spec.splits if s.name == "id/train")
    rows = rows_from_source(train.source)
    data = TransformedRows(rows, build_transform(spec.transform), (3, 32, 32))
    images = torch.stack([data[i][0] for i in range(len(data))])
    labels = torch.as_tensor(rows.labels)
    torch.manual_seed(0)
    model = demo_resnet(len(ID_CLASSES))
    history = train_ce(
        model, images, labels, TrainConfig(epochs=epochs, batch_size=64, lr=0.01, seed=0),
        on_epoch=lambda e, loss, acc: _epoch_done(log, progress, e, epochs, loss, acc),
        augment=random_shift,
    )
    tmp = out_file.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, out_file)
    return {"epochs": epochs, "final_loss": history[-1][0], "final_train_acc": history[-1][1]}


def _epoch_done(log: Callable[[str], None], progress: Progress | None, epoch: int,
                epochs: int, loss: float, acc: float) -> None:
    if progress is not None:
        progress("train demo ResNet (epochs)", epoch + 1, epochs)
    log(f"  epoch {epoch + 1:2d}/{epochs}  loss {loss:.3f}  train acc {acc:.1f}%")


def run_demo(out: Path, *, log: Callable[[str], None] = print,
             progress: Progress | None = None, epochs: int = 12) -> Store:
    """Spec + (cached) training + extraction; returns the opened store."""
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "spec.toml"
    spec_path.write_text(demo_spec_text(), encoding="utf-8")
    weights = out / "model.pt"
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if not weights.is_file():
        log(f"training the demo ResNet on digits {ID_CLASSES} ({epochs} epochs, CPU)")
        train_demo_model(spec_path, weights, epochs=epochs, log=log, progress=progress)
    else:
        log(f"reusing the trained model {weights}")
    opts = ExtractOptions(device="cpu", batch_size=128, num_workers=0)
    return extract(MODEL_SPEC, spec_path, out / "store", weights=weights, options=opts,
                   progress=progress)


def id_test_accuracy(store: Store) -> float:
    split = store.split("id/test")
    return float((np.asarray(split.logits).argmax(1) == np.asarray(split.labels)).mean() * 100)
