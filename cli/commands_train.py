"""`featstore train`: train a model on a spec's id/train split and write a checkpoint."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from .common import parse_params
from .console import JsonOpt, QuietOpt, emit, err, out, progress_enabled, run_progress, setup


@contextmanager
def train_progress(enabled: bool = True, label: str = "train") -> Iterator[Any]:
    """A callback for `featstore.training.trainer.train`: one bar over all steps on stderr,
    with epoch, running loss and accuracy (and any method metrics)."""
    if not enabled or not progress_enabled():
        yield None
        return
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[status]}"),
                        TimeRemainingColumn(elapsed_when_finished=True),
                        console=err, transient=False, redirect_stdout=False,
                        redirect_stderr=False)
    state: dict[str, Any] = {}

    def update(event: dict[str, Any]) -> None:
        total = event["epochs"] * event["batches"]
        done = (event["epoch"] - 1) * event["batches"] + event["batch"]
        extra = "".join(f"  {k} {v:.3g}" for k, v in event.items()
                        if k not in ("epoch", "epochs", "batch", "batches", "loss", "acc", "lr")
                        and isinstance(v, int | float))
        status = (f"epoch {event['epoch']}/{event['epochs']}  loss {event['loss']:.4f}  "
                  f"acc {event['acc']:.1f}%{extra}")
        if "task" not in state:
            state["task"] = progress.add_task(label, total=total, status=status)
        progress.update(state["task"], completed=done, total=total, status=status)

    with run_progress(progress):
        yield update


def train(
    arch: Annotated[str, typer.Option(help="torchvision architecture or module:callable "
                                           "taking num_classes=.")],
    spec: Annotated[Path, typer.Option(help="Benchmark spec (TOML); trains on id/train.")],
    out_: Annotated[Path, typer.Option("--out", help="Checkpoint file to write.")],
    method: Annotated[str, typer.Option(
        help="Training method: ce, logitnorm, confbranch, godin, oe, mcd, mcdropout "
             "(oe and mcd read outliers from an ood split with usage = \"train\").")] = "ce",
    preset: Annotated[str | None, typer.Option(
        help="Training preset of a paper: remote-sensing (SGD lr 0.01, momentum 0.9, wd "
             "5e-4, no Nesterov, constant lr, 100 epochs = the defaults) | openood (lr 0.1, "
             "Nesterov, cosine, 100 epochs, batch 128); explicit options override "
             "it.")] = None,
    epochs: Annotated[int | None, typer.Option(help="Epochs (default 100).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Images per batch (default "
                                                        "128).")] = None,
    lr: Annotated[float | None, typer.Option(help="SGD learning rate (default 0.01).")] = None,
    momentum: Annotated[float | None, typer.Option(help="SGD momentum (default 0.9).")] = None,
    weight_decay: Annotated[float | None, typer.Option(help="SGD weight decay (default "
                                                            "5e-4).")] = None,
    nesterov: Annotated[bool | None, typer.Option(
        "--nesterov/--no-nesterov", help="Nesterov momentum (default off).")] = None,
    schedule: Annotated[str | None, typer.Option(help="constant (default) | cosine "
                                                      "(per step to 1e-6)")] = None,
    augment: Annotated[str, typer.Option(help="none | flip | crop | flip+crop")] = "none",
    seed: Annotated[int, typer.Option(help="Seed of initialisation, order, "
                                           "augmentation.")] = 0,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N]")] = "auto",
    num_classes: Annotated[int | None, typer.Option(
        help="Head size (default: the spec's classes, else from the labels).")] = None,
    workers: Annotated[int, typer.Option(help="DataLoader workers (when not "
                                              "preloaded).")] = 0,
    param: Annotated[list[str] | None, typer.Option(
        help="k=v method parameter (e.g. tau=0.04 for logitnorm); repeatable.")] = None,
    init: Annotated[Path | None, typer.Option(
        help="Warm start: weights of the plain model (e.g. a ce checkpoint) to fine-tune "
             "with --method.")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Train a classifier on the spec's id/train split (SGD, seeded) and write a checkpoint
    that `featstore extract --model ARCH --weights CKPT` reads.

    Example: featstore train --method ce --arch resnet18 --spec bench.toml --out r18.pt
    --epochs 100
    """
    setup(json_, quiet)
    from featstore.training.presets import make_config
    from featstore.training.trainer import load_checkpoint
    from featstore.training.trainer import train as run_train

    config = make_config(preset, epochs=epochs, batch_size=batch_size, lr=lr,
                         momentum=momentum, weight_decay=weight_decay, nesterov=nesterov,
                         schedule=schedule, augment=augment, seed=seed, device=device,
                         num_workers=workers, method_params=parse_params(param),
                         init=str(init) if init is not None else None)
    start = time.perf_counter()
    with train_progress(True, f"{method} {arch}") as progress:
        path = run_train(method, arch, spec, out_, config, num_classes=num_classes,
                         progress=progress)
    seconds = time.perf_counter() - start
    ckpt = load_checkpoint(path)
    loss, acc = ckpt["history"][-1]
    summary = {"checkpoint": str(path), "method": ckpt["method"], "arch": ckpt["arch"],
               "num_classes": ckpt["num_classes"], "epochs": config.epochs,
               "preset": preset, "config": ckpt["config"], "final_loss": loss,
               "final_train_acc": acc, "seconds": seconds}

    def human() -> None:
        out.print(f"wrote {path}  ({ckpt['method']}, {ckpt['arch']}, "
                  f"{ckpt['num_classes']} classes)  final loss {loss:.4f}, train acc "
                  f"{acc:.1f}%  in {seconds:.1f} s", highlight=False)
        out.print(f"extract with: featstore extract --model {ckpt['arch']} --weights {path} "
                  f"--spec {spec} --out STORE", highlight=False)

    emit(summary, human)


def register(app: typer.Typer) -> None:
    app.command()(train)
