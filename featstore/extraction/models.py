"""Load a model for extraction and find its classifier head (DESIGN §6).

A model spec is one of
- a torchvision architecture name (`resnet18`, `resnet50`, `vit_b_16`, ...), built with random
  initialization and loaded from `--weights` (a local file, `torch.load(weights_only=True)`);
  a pretrained-weights enum name (e.g. `IMAGENET1K_V2`) is refused: nothing downloads;
- `module:callable` returning an `nn.Module` (weights from `--weights` if given);
- a TorchScript file (`*.pt`/`*.pth` saved by `torch.jit.save`).

The head is the final `nn.Linear` in module order (or the one named by `--feature-layer`):
its input is the penultimate feature and its (weight, bias) the head stored in model.h5.
Extraction then checks it against the model's own output and picks the Linear that produces
it (`featstore.extraction.outputs.resolve_layers`). Without a head (`--no-head`, or
`--feature-layer` naming a layer that is not an nn.Linear) the feature is the named layer's input (a
Linear) or output (any other module, 4-D outputs average-pooled over H x W), the logits are the
model's output and no (W, b) is stored.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from featstore.errors import FeatstoreWarning, InputError, UsageError
from featstore.extraction.heads import checkpoint_method, find_head, wrap_for_checkpoint
from featstore.extraction.zoo import canonical_model_name
from featstore.specs.usercode import import_user_module
from featstore.store.fileio import sha256_arrays, sha256_file

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class LoadedModel:
    """A model ready for extraction, its head layer and its provenance record.

    `head` is None for a model extracted without a head; `feature_name` names the layer whose
    input (an nn.Linear) or output (any other module) is the feature; `num_classes` and
    `feature_dim` are the head's, or the probe's (`featstore.extraction.outputs`) without one."""

    module: nn.Module
    head_name: str | None
    head: nn.Linear | None
    provenance: dict[str, Any]
    transform: dict[str, Any] = field(default_factory=dict)
    feature_name: str = ""
    num_classes: int = 0
    feature_dim: int = 0

    @property
    def feature_module(self) -> nn.Module:
        """The hooked layer: the head, or the named feature layer without one."""
        return self.head if self.head is not None else \
            self.module.get_submodule(self.feature_name)

    def set_head(self, name: str, head: nn.Linear) -> None:
        """Hook `head` (named `name`) as the classifier head."""
        self.head_name, self.head, self.feature_name = name, head, name
        self.num_classes, self.feature_dim = int(head.out_features), int(head.in_features)
        self.provenance["head_layer"] = name
        self.provenance["feature_layer"] = name


def _strip_prefixes(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    for prefix in ("module.", "model."):
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def load_weights_file(path: Path, option: str = "--weights") -> Any:
    """The object a weights file holds, loaded with weights_only=True (InputError naming the
    option and the file when it is missing or not loadable)."""
    if not path.is_file():
        raise InputError(f"{option} {str(path)!r}: file not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for bad files
        raise InputError(f"{option} {str(path)!r}: {_unloadable_reason(path, exc)}") from exc


_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _unloadable_reason(path: Path, exc: Exception) -> str:
    """One line on why torch.load(weights_only=True) refused a file: what the file looks like
    by its first bytes, else the unpickler's own detail (never torch's advice to turn
    weights_only off, which would run code from the file)."""
    with path.open("rb") as fh:
        head = fh.read(8)
    if head.startswith(_HDF5_MAGIC):
        return ("an HDF5 file (e.g. Keras weights), not a PyTorch state dict; convert it to a "
                ".pt/.pth state dict (torch.save(model.state_dict(), path))")
    text = str(exc)
    if "WeightsUnpickler error:" in text:
        detail = next((ln.strip() for ln in text.split("WeightsUnpickler error:", 1)[1]
                       .splitlines() if ln.strip()), "")
        return (f"not a state dict loadable with weights_only=True ({detail}); featstore "
                "never unpickles arbitrary objects: save a plain state dict of tensors")
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"not a loadable state dict ({first})"


def load_checked(module: nn.Module, state: dict[str, torch.Tensor], what: str,
                 **kwargs: Any) -> Any:
    """module.load_state_dict(state, strict=False, **kwargs); a tensor of the wrong shape is
    an InputError naming `what` (e.g. "--weights 'r50.pth'") and the first mismatched keys
    with both shapes, instead of torch's multi-line RuntimeError."""
    try:
        return module.load_state_dict(state, strict=False, **kwargs)
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "size mismatch" in ln]
        shown = "; ".join(ln.rstrip(".") for ln in lines[:3]) + (" …" if len(lines) > 3 else "")
        raise InputError(f"{what} does not fit {type(module).__name__}: "
                         f"{shown or str(exc).splitlines()[0]}") from None


def state_dict_of(obj: Any, path: Path, option: str = "--weights") -> dict[str, torch.Tensor]:
    """The state dict in a loaded weights object; unwrap {'state_dict': ...}/{'model': ...}."""
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise InputError(f"{option} {str(path)!r}: expected a dict of tensors (a state dict)")
    return _strip_prefixes(dict(obj))


def load_state_dict_file(path: Path, option: str = "--weights") -> dict[str, torch.Tensor]:
    """Load a state dict with weights_only=True; unwrap {'state_dict': ...}/{'model': ...}.
    Errors name `option` (the command-line option that gave the path) and the file."""
    return state_dict_of(load_weights_file(path, option), path, option)


def state_dict_sha256(module: nn.Module) -> str:
    """Digest of a module's state dict (names, dtypes, shapes and bytes in sorted order)."""
    return sha256_arrays({k: v.detach().cpu().numpy() for k, v in module.state_dict().items()})


def torchvision_default_transform(arch: str) -> dict[str, Any]:
    """Resize/crop/mean/std of the architecture's default weights enum (read, not downloaded)."""
    try:
        weights_enum = torchvision.models.get_model_weights(arch)
        preset = weights_enum.DEFAULT.transforms()
        resize = preset.resize_size
        return {"resize": int(resize[0] if isinstance(resize, list | tuple) else resize),
                "crop": int(preset.crop_size[0]), "mean": list(preset.mean),
                "std": list(preset.std)}
    except (ValueError, AttributeError):
        return default_transform()


def default_transform() -> dict[str, Any]:
    """ImageNet's standard eval transform: resize 256, center crop 224, ImageNet mean/std."""
    return {"resize": 256, "crop": 224, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)}


def build_torchvision(arch: str, num_classes: int | None) -> nn.Module:
    kwargs: dict[str, Any] = {"weights": None}
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    return torchvision.models.get_model(arch, **kwargs)


def _accepts_num_classes(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "num_classes" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def import_callable(spec: str, num_classes: int | None = None) -> nn.Module:
    """Call `module:callable` (with `num_classes=` when given and the callable accepts it);
    an older name of one of featstore's own networks loads the network it names now."""
    module_name, _, attr = canonical_model_name(spec).partition(":")
    try:  # the one rule for a user's module (featstore.specs.usercode): found in the cwd
        mod = import_user_module(module_name)
    except UsageError as exc:  # InputError included: re-raised naming --model
        raise type(exc)(exc.message, param="model", value=spec) from None
    fn = getattr(mod, attr, None)
    if fn is None:
        raise UsageError(f"module {module_name!r} has no attribute {attr!r}", param="model",
                         value=spec)
    if callable(fn) and not isinstance(fn, nn.Module):
        with_classes = num_classes is not None and _accepts_num_classes(fn)
        try:
            model = fn(num_classes=num_classes) if with_classes else fn()
        except Exception as exc:  # the user's callable: name it instead of "unexpected"
            raise InputError(f"{attr}() raised {type(exc).__name__}: {_first_line(exc)}",
                             param="model", value=spec) from exc
    else:
        model = fn
    if not isinstance(model, nn.Module):
        raise UsageError(f"{attr} returned {type(model).__name__}, expected an nn.Module",
                         param="model", value=spec)
    return model


class ScriptedWithHead(nn.Module):
    """A TorchScript model seen through its exported `penultimate(x)` and a copy of its head.

    Scripted modules cannot take forward hooks, so featstore calls the model's exported
    `penultimate(x) -> (N, D)` method and applies an ordinary nn.Linear holding the scripted
    head's weight and bias: logits = penultimate(x) @ W.T + b, as the hook would capture."""

    def __init__(self, scripted: torch.jit.ScriptModule, head_name: str):
        super().__init__()
        self.scripted = scripted
        layer = dict(scripted.named_modules())[head_name]
        self.fc = nn.Linear(layer.weight.shape[1], layer.weight.shape[0])
        with torch.no_grad():
            self.fc.weight.copy_(layer.weight)
            self.fc.bias.copy_(layer.bias)
        self.scripted_name = getattr(scripted, "original_name", "ScriptModule")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.scripted.penultimate(x))


def _load_torchscript(path: Path, feature_layer: str | None, no_head: bool
                      ) -> ScriptedWithHead:
    """The scripted model behind `ScriptedWithHead`: features = its exported penultimate(x),
    logits through a copy of its Linear head (`feature_layer` names that Linear). `no_head`
    is refused: without a Linear head nothing defines its logits but an unhookable forward."""
    if no_head:
        raise UsageError(f"--no-head: not supported for the TorchScript model {str(path)!r} "
                         "(scripted modules cannot be hooked: features come from its exported "
                         "penultimate(x) and logits from a copy of its Linear head); load the "
                         "model as a module:callable instead")
    try:
        scripted = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise InputError(f"--model {str(path)!r}: not a TorchScript file ({exc})") from exc
    if not hasattr(scripted, "penultimate"):
        raise InputError(
            f"--model {str(path)!r}: TorchScript models cannot be hooked; export a "
            "`penultimate(x) -> (N, D)` method with @torch.jit.export"
        )
    linears = [n for n, m in scripted.named_modules()
               if getattr(m, "original_name", "") == "Linear"]
    if feature_layer is not None and feature_layer not in linears:
        raise UsageError(f"--feature-layer {feature_layer!r}: not a Linear of the TorchScript "
                         f"model (Linear layers: {', '.join(linears) or 'none'})")
    if not linears:
        raise InputError(f"--model {str(path)!r}: no Linear classifier head found")
    return ScriptedWithHead(scripted, feature_layer or linears[-1])


def _head_num_classes(state: dict[str, torch.Tensor], head_name: str) -> int | None:
    weight = state.get(f"{head_name}.weight")
    return int(weight.shape[0]) if weight is not None and weight.ndim == 2 else None


def _construct(build: Callable[[int | None], nn.Module], num_classes: int | None,
               state: dict[str, torch.Tensor] | None, feature_layer: str | None,
               trained: dict[str, Any] | None, meta: bool) -> nn.Module:
    """build(num_classes), with the head size read off the weights when not given, and the
    training-method wrapper of a `featstore train` checkpoint; on the meta device if `meta`
    and the builder allows it."""
    def make(n: int | None) -> nn.Module:
        if meta:
            try:
                with torch.device("meta"), _weight_init_skipped(), _own_loading_quiet():
                    return build(n)
            except UsageError:
                raise
            except Exception:  # a builder that cannot run on meta: build for real
                pass
        return build(n)

    module = make(num_classes)
    if state is not None and num_classes is None:  # head size from the weights
        try:
            head_name, head = find_head(module, feature_layer)
        except UsageError:  # no Linear head (extraction without one): nothing to size
            head_name, head = "", nn.Linear(1, 1)
        inferred = _head_num_classes(state, head_name)
        if inferred is not None and inferred != head.out_features:
            module = make(inferred)
    if trained is not None:
        module = wrap_for_checkpoint(module, trained)
    return module


#: torch's warning when a builder loads its own weights into a meta-device module (a no-op:
#: every tensor is then replaced by --weights, which must cover them all)
_META_COPY = "copying from a non-meta parameter"


@contextlib.contextmanager
def _own_loading_quiet() -> Iterator[None]:
    """Drop torch's per-tensor "copying from a non-meta parameter ... no-op" warnings of a
    `module:callable` that loads its own weights while built on the meta device (hundreds of
    lines for a ResNet); --weights then replaces every tensor. Other warnings pass on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if _META_COPY not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@contextlib.contextmanager
def _weight_init_skipped() -> Iterator[None]:
    """torch.nn.init's initializers as no-ops for a meta-device build whose every tensor the
    weights then replace (on meta they still run, through torch's reference decompositions,
    slowly). Buffers and plain tensors are not made by them, and a tensor the
    weights do not cover stays on meta, where `_assign_state` notices it."""
    names = [n for n in dir(nn.init) if n.endswith("_") and not n.startswith("_")
             and callable(getattr(nn.init, n))]
    saved = {n: getattr(nn.init, n) for n in names}

    def keep(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor

    try:
        for n in names:
            setattr(nn.init, n, keep)
        yield
    finally:
        for n, fn in saved.items():
            setattr(nn.init, n, fn)


def _check_load(result: Any, weights_path: Path | None, arch: str) -> None:
    missing, unexpected = list(result.missing_keys), list(result.unexpected_keys)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys {missing[:5]}{' …' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(
                f"unexpected keys {unexpected[:5]}{' …' if len(unexpected) > 5 else ''}")
        raise InputError(f"--weights {str(weights_path)!r} does not fit {arch}: "
                         + "; ".join(parts))


def _load_state(module: nn.Module, state: dict[str, torch.Tensor],
                weights_path: Path | None, arch: str) -> None:
    """Copy the weights into a built module; every key must match (InputError naming them,
    exit 1 like a shape mismatch: the file named is wrong, not the command line)."""
    _check_load(load_checked(module, state, f"--weights {str(weights_path)!r}"),
                weights_path, arch)


def _assign_state(module: nn.Module, state: dict[str, torch.Tensor],
                  weights_path: Path | None, arch: str) -> bool:
    """Load the weights into `module`; if it was built on the meta device, by assigning the
    loaded tensors (cast to the module's dtypes, as copying would). False when a tensor is
    still on meta afterwards (the caller builds for real)."""
    if not _has_meta_tensor(module):
        _load_state(module, state, weights_path, arch)
        return True
    own = module.state_dict()
    cast = {k: v.to(own[k].dtype) if k in own and own[k].dtype != v.dtype else v
            for k, v in state.items()}
    _check_load(load_checked(module, cast, f"--weights {str(weights_path)!r}", assign=True),
                weights_path, arch)
    return not _has_meta_tensor(module)


def _has_meta_tensor(module: nn.Module) -> bool:
    """A parameter, buffer or plain tensor attribute of any submodule on the meta device."""
    for m in module.modules():
        tensors = [*m._parameters.values(), *m._buffers.values(),
                   *(v for v in vars(m).values() if isinstance(v, torch.Tensor))]
        if any(t is not None and t.is_meta for t in tensors):
            return True
    return False


def resolve_device(device: str) -> torch.device:
    """The torch device of `--device` (auto: CUDA when available, else CPU)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("CUDA is not available on this machine", param="device", value=device)
    if device != "cpu" and not device.startswith("cuda"):
        raise UsageError("expected auto, cpu or cuda[:N]", param="device", value=device)
    return torch.device(device)


def weights_source(kind: str, weights_path: Path | None) -> str:
    """Where the extracted weights came from, as store.json records it."""
    if weights_path is not None:
        return "weights file"
    return {"torchvision": "random initialisation",
            "callable": "the module:callable itself (no --weights)",
            "torchscript": "the TorchScript file"}.get(kind, kind)


def select_layers(module: nn.Module, feature_layer: str | None, no_head: bool
                  ) -> tuple[str | None, nn.Linear | None, str]:
    """(head name, head, feature layer name): the classifier Linear (`find_head`), or no head
    when `no_head` or `feature_layer` names a module that is not an nn.Linear."""
    named = dict(module.named_modules())
    if feature_layer is not None and feature_layer in named and feature_layer \
            and not isinstance(named[feature_layer], nn.Linear):
        return None, None, feature_layer
    if no_head:
        if feature_layer is None or feature_layer not in named or not feature_layer:
            shown = [n for n in named if n][-8:]
            raise UsageError(f"--no-head needs --feature-layer LAYER, a module of "
                             f"{type(module).__name__} (last modules: {', '.join(shown)}); "
                             f"got {feature_layer!r}")
        return None, None, feature_layer
    name, head = find_head(module, feature_layer)
    return name, head, name


def model_spec_kind(spec: str) -> str | None:
    """What `load_model` makes of `spec`, by its form alone: "callable" (`module:callable`,
    not an existing path), "torchvision" (an architecture name), "torchscript" (an existing
    file), or None. The one rule: a caller deciding whether a name is code asks this."""
    if ":" in spec and not Path(spec).exists():
        return "callable"
    if spec in set(torchvision.models.list_models()):
        return "torchvision"
    return "torchscript" if Path(spec).is_file() else None


def load_model(
    spec: str,
    weights: str | Path | None = None,
    feature_layer: str | None = None,
    num_classes: int | None = None,
    no_head: bool = False,
) -> LoadedModel:
    """Build the model named by `spec`, load local weights strictly, find the head (or, with
    `no_head` or a non-Linear `feature_layer`, the feature layer only)."""
    weights_path = Path(weights) if weights is not None else None
    if weights_path is not None and not weights_path.exists():
        upper = str(weights)
        if upper.isupper() or "IMAGENET" in upper or upper == "DEFAULT":
            raise UsageError(
                f"--weights {upper!r} names a pretrained-weights enum, which would download; "
                "featstore never downloads: pass a local weights file"
            )
    raw = load_weights_file(weights_path) if weights_path is not None else None
    state = state_dict_of(raw, weights_path) if weights_path is not None else None
    # a `featstore train` checkpoint: rebuild its method's wrapper (extra heads) around the model
    trained = checkpoint_method(raw) if weights_path is not None else None
    if trained is not None and num_classes is None:
        num_classes = trained["num_classes"]
    path = Path(spec)
    build: Callable[[int | None], nn.Module] | None = None
    module: nn.Module
    spec_is = model_spec_kind(spec)
    if spec_is == "callable":
        def build(n: int | None) -> nn.Module:
            return import_callable(spec, n)
        kind, transform = "callable", default_transform()
    elif spec_is == "torchvision":
        def build(n: int | None) -> nn.Module:
            return build_torchvision(spec, n)
        kind, transform = "torchvision", torchvision_default_transform(spec)
    elif spec_is == "torchscript":
        scripted = _load_torchscript(path, feature_layer, no_head)
        module, kind, arch = scripted, "torchscript", scripted.scripted_name
        transform = default_transform()
    else:
        raise UsageError(f"--model {spec!r}: not a torchvision architecture, a module:callable "
                         "or a TorchScript file (e.g. resnet50, mypkg.models:build, model.ts)")
    if build is not None:
        # With weights, build on the meta device (no random initialisation that the weights
        # would overwrite), then assign the loaded tensors; `_assign_state` falls back to a
        # real build when the weights leave a tensor unset (e.g. a non-persistent buffer).
        module = _construct(build, num_classes, state, feature_layer, trained,
                            meta=state is not None)
        arch = spec if kind == "torchvision" else type(module).__name__
        if state is not None and not _assign_state(module, state, weights_path, arch):
            module = _construct(build, num_classes, state, feature_layer, trained, meta=False)
            _load_state(module, state, weights_path, arch)
    elif state is not None:
        _load_state(module, state, weights_path, arch)
    head_name, head, feature_name = select_layers(
        module, None if kind == "torchscript" else feature_layer, no_head)
    sha = sha256_file(weights_path) if weights_path is not None else state_dict_sha256(module)
    source = weights_source(kind, weights_path)
    if source == "random initialisation":
        warnings.warn(f"--model {spec!r} without --weights: the network has RANDOM weights "
                      "(torchvision builds it untrained and featstore never downloads); pass "
                      "--weights FILE for a trained model", FeatstoreWarning, stacklevel=2)
    provenance = {
        "name": spec, "kind": kind, "architecture": arch,
        "weights": str(weights_path) if weights_path is not None else None,
        "weights_source": source, "sha256": sha,
        "sha256_of": "weights file" if weights_path is not None else "state dict",
        "head_layer": head_name, "feature_layer": feature_name,
        "feature_taken": "input" if isinstance(module.get_submodule(feature_name), nn.Linear)
        else "output",
        "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
    }
    if trained is not None:
        provenance["training_method"] = trained["method"]
    module.eval()
    loaded = LoadedModel(module, head_name, head, provenance, transform, feature_name)
    if head is not None and head_name is not None:
        loaded.set_head(head_name, head)
    return loaded
