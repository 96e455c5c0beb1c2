"""featstore's own networks (the demo's), loadable by their recorded names.

`OWN_MODELS`: backbone name -> the `module:callable` a store records for it. A store whose
model is one of these loads by that name alone (`featstore.Detector.score_images`); any other
callable loads only when the caller names it.
"""

OWN_MODELS: dict[str, str] = {
    "pretrained": "featstore.extraction.zoo.lite0:lite0_classifier",
    "scratch": "featstore.extraction.zoo.demo_resnet:demo_resnet",
}

#: names that stores written before the zoo had its own package record for the same networks
RECORDED_ALIASES: dict[str, str] = {
    "featstore.demo.model:demo_resnet": OWN_MODELS["scratch"],
    "featstore.demo.backbone:lite0_classifier": OWN_MODELS["pretrained"],
}


def canonical_model_name(name: str) -> str:
    """The `module:callable` that loads a recorded model name (aliases resolved)."""
    return RECORDED_ALIASES.get(name, name)
