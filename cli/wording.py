"""The CLI's words for what library errors carry as data (featstore.errors): a parameter is
named as its option (`out` -> `--out`, `overwrite=True` -> `--overwrite`), and how to produce a
scorer need as the commands that write it. `cli.app.main` installs `CLI_WORDING` for the run
of a command, so errors, skip reasons and how-to hints read in the CLI's terms."""

from __future__ import annotations

from typing import Any

from featstore.errors import Wording, shown
from featstore.store.extra_keys import parse_odin_name

#: Library parameter -> CLI option, where the option is not `--` + the name with dashes.
OPTIONS = {
    "path": "--out",          # Store.create(path): the store a command writes
    "num_workers": "--workers",
}

#: How to produce each need that a store can lack, as commands.
HOW_TO = {
    "store": "create one with `featstore extract` or `featstore import`",
    "fit:id/train": "extract it by naming an `id/train` split in the benchmark spec",
    "fit:id/val": "extract it by naming an `id/val` split in the benchmark spec",
    "extra:feature_maps": "extract with `featstore extract --feature-maps`",
    "extra:mc_logits": "extract with `featstore extract --mc-samples T` on a model with dropout",
    "extra:odin_logits": "extract with `featstore extract --odin-grid 'T:eps[,eps...]'`",
    "extra:layer_features": "extract with `featstore extract --feature-layers NAME[,NAME...]`",
    "extra:layer_featurenorm": "extract with `featstore extract --feature-layers "
                               "NAME[,NAME...]`",
    "extra:layer_gram": "extract with `featstore extract --feature-layers NAME[,NAME...] "
                        "--gram-powers 5`",
    "extra:adascale_features": "extract with `featstore extract --adascale-o 0.05`",
    "extra:confidence": "train with `featstore train --method confbranch`, then `featstore "
                        "extract --weights` the checkpoint",
    "extra:godin_h": "train with `featstore train --method godin`, then `featstore extract "
                     "--weights` the checkpoint",
    "extra:godin_g": "train with `featstore train --method godin`, then `featstore extract "
                     "--weights` the checkpoint",
    "extra:head2_logits": "train with `featstore train --method mcd`, then `featstore extract "
                          "--weights` the checkpoint",
}


def option(param: str) -> str:
    """The CLI option of a library parameter: `overwrite` -> `--overwrite`."""
    return OPTIONS.get(param, "--" + param.replace("_", "-"))


class CliWording(Wording):
    """Options instead of keyword arguments, commands instead of library calls."""

    def value(self, param: str, value: Any) -> str:
        return f"{option(param)} {shown(value)}"

    def setting(self, param: str, value: Any) -> str:
        flag = option(param)
        if value is True:
            return flag
        if value is False:
            return "--no-" + flag[2:]
        return f"{flag} {value}"

    def how_to(self, need: str, how: str) -> str:
        pair = parse_odin_name(need.removeprefix("extra:"))  # one (T, eps) of the ODIN grid
        if pair is not None:
            return f"extract them with `featstore extract --odin-grid '{pair[0]:g}:{pair[1]:g}'`"
        group, _, member = need.partition("/")
        if member and group == "extra:adascale_features":
            return f"extract them with `featstore extract --adascale-o {member}`"
        if member and group in ("extra:layer_features", "extra:layer_featurenorm"):
            return f"extract them with `featstore extract --feature-layers {member}`"
        if member and group == "extra:layer_gram":
            return (f"extract them with `featstore extract --feature-layers {member} "
                    "--gram-powers 5`")
        return HOW_TO.get(need, HOW_TO.get(group, how))


CLI_WORDING = CliWording()
