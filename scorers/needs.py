"""What a scorer needs from a store, as a typed value: the one parser of the `needs` strings.

A scorer class declares `needs` as strings (`scorers.base.Scorer.needs`), one of:

- `features`, `logits`: row fields of every split it reads;
- `head`: the classifier head (W, b) of model.h5;
- `fit:<split>`: a split it fits on (e.g. `fit:id/train`, `fit:id/val`);
- `extra:<name>`: an extra array of the splits (e.g. `extra:mc_logits`).

`parse_need` turns one string into a `Need`; `Needs.of(scorer)` parses a scorer's tuple once
and answers the questions the library asks of it (which splits it fits on, which row fields
it reads, which extras it needs). A string outside this vocabulary is a ValueError naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

NeedKind = Literal["features", "logits", "head", "fit", "extra"]
FIELD_KINDS: tuple[str, ...] = ("features", "logits", "head")
ARG_KINDS: tuple[str, ...] = ("fit", "extra")


@dataclass(frozen=True)
class Need:
    """One need: its kind and, for `fit` and `extra`, the split or extra name (`arg`)."""

    kind: NeedKind
    arg: str = ""

    @property
    def text(self) -> str:
        """The declared string: `features`, `fit:id/train`, `extra:confidence`, ..."""
        return f"{self.kind}:{self.arg}" if self.arg else self.kind

    @property
    def reads_values(self) -> bool:
        """Whether the scorer reads this need's values row by row (features, logits, an
        extra), i.e. whether NaN / inf in it reaches the scores."""
        return self.kind in ("features", "logits", "extra")

    def __str__(self) -> str:
        return self.text


def parse_need(text: str) -> Need:
    """`"fit:id/train"` -> Need("fit", "id/train"); ValueError naming a string outside the
    vocabulary (module docstring)."""
    if text in FIELD_KINDS:
        return Need(text)  # type: ignore[arg-type]
    kind, sep, arg = text.partition(":")
    if sep and kind in ARG_KINDS and arg:
        return Need(kind, arg)  # type: ignore[arg-type]
    raise ValueError(f"need {text!r}: expected one of {', '.join(FIELD_KINDS)}, "
                     "fit:<split> or extra:<name>")


@dataclass(frozen=True)
class Needs:
    """A scorer's parsed needs, in declaration order."""

    items: tuple[Need, ...]

    @classmethod
    def parse(cls, texts: Iterable[str]) -> Needs:
        return _parse_all(tuple(texts))

    @classmethod
    def of(cls, scorer: Any) -> Needs:
        """The needs of a scorer class or instance (its `needs` strings, parsed once)."""
        return _parse_all(tuple(scorer.needs))

    @property
    def fit_splits(self) -> list[str]:
        """The splits it fits on (`fit:<split>`), in order."""
        return [n.arg for n in self.items if n.kind == "fit"]

    @property
    def extras(self) -> list[str]:
        """The extra arrays it reads (`extra:<name>` -> name), in order."""
        return [n.arg for n in self.items if n.kind == "extra"]

    @property
    def value_fields(self) -> list[str]:
        """The row fields it reads values from, as `featstore.store.values.require_finite` names
        them: `features`, `logits`, `extra:<name>`."""
        return [n.text for n in self.items if n.reads_values]

    @property
    def texts(self) -> list[str]:
        return [n.text for n in self.items]

    def __iter__(self) -> Iterator[Need]:
        return iter(self.items)

    def __contains__(self, kind: object) -> bool:
        """`"head" in needs`: whether a need of that kind (or that exact text) is declared."""
        return any(kind in (n.kind, n.text) for n in self.items)


@cache
def _parse_all(texts: tuple[str, ...]) -> Needs:
    return Needs(tuple(parse_need(t) for t in texts))


__all__ = ["Need", "Needs", "parse_need"]
