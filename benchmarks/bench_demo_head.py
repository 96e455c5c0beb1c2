"""Benchmark: the demo's head on the frozen pretrained backbone: linear head vs a light fine-tune.

Run ``python -m benchmarks.bench_demo_head [--demo runs/demo] [--epochs 5] [--scale 1.0]``.

Both variants start from the default demo (`featstore demo`, built or reused under ``--demo``:
ImageNet EfficientNet-Lite0 frozen at 64 px, a logistic-regression head on digits 0-5):

- `linear head` (what the demo ships): the demo store as extracted;
- `light fine-tune`: the last MBConv block, the 1x1 head convolution and the head (1.1 M of
  the 3.4 M backbone parameters + 7.7 k) trained on id/train with cross-entropy (Adam, lr 1e-4,
  batch 64, ``--epochs``, seed 0; BatchNorm statistics frozen; the head starts from the
  logistic regression), on the cached activations entering that block, so each epoch costs
  only the fine-tuned part. Its features and logits of every split go into a second store.

Both stores are evaluated with the same scorers (AUROC per OOD group, ID accuracy); the
fine-tune's cost is reported as CPU seconds (time.process_time) of the caching forward pass
and of the training. Output is Markdown on stdout.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from featstore import Store
from featstore.extraction.datasets import TransformedRows, build_transform, rows_from_source
from featstore.extraction.zoo.lite0 import INPUT_SIZE, lite0_classifier
from featstore.specs.benchmark import load_spec
from featstore.workflows.demo.pipeline import ID_CLASSES, id_test_accuracy, run_demo
from scorers.evaluate import evaluate

SCORERS = ["msp", "energy", "mls", "knn", "vim", "mds", "rmds", "gradnorm"]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)



@torch.inference_mode()
def _cache_inputs(model, spec_path: Path) -> dict[str, tuple[torch.Tensor, np.ndarray, str]]:
    """Activations entering the last MBConv block for id/train, id/test and the OOD test splits
    (frozen part run once)."""
    spec = load_spec(spec_path)
    transform = build_transform(spec.transform)
    net = model.backbone
    out = {}
    for split in spec.splits:
        if split.usage == "val" or split.name.startswith("csid/") or split.name == "id/val":
            continue                              # evaluation reads id/test and OOD test splits
        rows = rows_from_source(split.source)
        data = TransformedRows(rows, transform, (3, INPUT_SIZE, INPUT_SIZE))
        acts = []
        for start in range(0, len(data), 128):
            x = torch.stack([data[i][0] for i in range(start, min(len(data), start + 128))])
            x = net._swish(net._bn0(net._conv_stem(x)))
            for idx, block in enumerate(net._blocks[:-1]):
                rate = net._global_params.drop_connect_rate * idx / len(net._blocks)
                x = block(x, drop_connect_rate=rate)
            acts.append(x)
        out[split.name] = (torch.cat(acts), np.asarray(rows.labels), split.usage)
    return out


def _tail(model, x: torch.Tensor) -> torch.Tensor:
    """Penultimate features from the cached activations (last block + head conv + pool)."""
    net = model.backbone
    x = net._blocks[-1](x, drop_connect_rate=None)
    x = net._swish(net._bn1(net._conv_head(x)))
    return model.pool(x).flatten(1)


def fine_tune(model, cached, epochs: int) -> float:
    """Train the tail and head on id/train's cached activations; CPU seconds."""
    net = model.backbone
    params = [*net._blocks[-1].parameters(), *net._conv_head.parameters(),
              *model.fc.parameters()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=1e-4)
    x, y, _ = cached["id/train"]
    y = torch.as_tensor(y)
    g = torch.Generator().manual_seed(0)
    t0 = time.process_time()
    model.eval()                                  # BatchNorm statistics stay frozen
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=g)
        total = 0.0
        for start in range(0, len(x), 64):
            idx = order[start:start + 64]
            loss = torch.nn.functional.cross_entropy(model.fc(_tail(model, x[idx])), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
        _log(f"  fine-tune epoch {epoch + 1}/{epochs}: loss {total / len(x):.4f}")
    return time.process_time() - t0


def _row(name: str, store: Store, cost: str) -> str:
    res = evaluate(store, SCORERS, params={}, use_cache=False)
    cells = []
    for m in SCORERS:
        g = res["methods"][m]["groups"]
        cells.append(f"{g['near']['auroc']:.1f} / {g['far']['auroc']:.1f}")
    return f"| {name} | {id_test_accuracy(store):.1f} | {cost} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, default=Path("runs/demo"))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    load0 = open("/proc/loadavg").read().split()[:3]
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    demo = run_demo(args.demo, scale=args.scale, progress=None)
    model = lite0_classifier(len(ID_CLASSES))
    model.load_state_dict(torch.load(args.demo / "model.pt", map_location="cpu",
                                     weights_only=True))
    t0 = time.process_time()
    cached = _cache_inputs(model, args.demo / "spec.toml")
    cache_s = time.process_time() - t0
    train_s = fine_tune(model, cached, args.epochs)
    with torch.inference_mode():
        splits = {}
        for name, (x, labels, usage) in cached.items():
            feats = torch.cat([_tail(model, x[i:i + 256]) for i in range(0, len(x), 256)])
            splits[name] = {"features": feats.numpy(), "labels": labels}
            if usage is not None:
                splits[name]["usage"] = usage
    w = model.fc.weight.detach().numpy().copy()
    b = model.fc.bias.detach().numpy().copy()
    with tempfile.TemporaryDirectory() as tmp:
        tuned = Store.from_arrays(Path(tmp) / "ft", head=(w, b), splits=splits,
                                  classes=[str(c) for c in ID_CLASSES])
        tuned = Store.open(Path(tmp) / "ft")
        print("### Demo head: linear head vs light fine-tune (frozen ImageNet EfficientNet-Lite0, "
              f"{INPUT_SIZE} px)\n")
        print(f"- date: {_dt.date.today()}; command: `python -m benchmarks.bench_demo_head "
              f"--epochs {args.epochs} --scale {args.scale}`")
        print(f"- load average at start: {' '.join(load0)}; at end: "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
        print(f"- fine-tune: {args.epochs} epochs on {len(cached['id/train'][0])} id/train rows;"
              f" caching forward {cache_s:.1f} CPU-s (every split), training {train_s:.1f} "
              "CPU-s\n")
        print("| head | ID acc % | extra CPU-s | " + " | ".join(f"{m} near / far AUROC"
                                                           for m in SCORERS) + " |")
        print("|---|---:|---:|" + "---:|" * len(SCORERS))
        print(_row("linear head (demo)", demo, "0"))
        print(_row(f"light fine-tune ({args.epochs} ep)", tuned, f"{train_s:.1f}"))


if __name__ == "__main__":
    main()
