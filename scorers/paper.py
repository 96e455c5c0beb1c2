"""`Paper`: the structured reference of a scorer (title, authors, venue, year, url, code).

A scorer's `paper` class attribute is a `Paper` (every built-in) or, for scorers of your own,
still a plain string. `str(paper)` is the one-line citation the catalogue and the contract's
docstring check read: "A, B & C, Title, Venue Year (note)", first author first. `url` links
the paper (arXiv, the venue's page or its DOI), `code` the authors' official code, None
where there is none we know of.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Paper:
    """One publication: authors are surnames, in the paper's order."""

    title: str
    authors: tuple[str, ...]
    venue: str
    year: int
    url: str | None = None
    code: str | None = None
    note: str = ""

    def __str__(self) -> str:
        names = self.authors
        who = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} & {names[-1]}"
        text = f"{who}, {self.title}, {self.venue} {self.year}"
        return f"{text} ({self.note})" if self.note else text

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON object (authors as a list)."""
        out = asdict(self)
        out["authors"] = list(self.authors)
        return out


def paper_json(paper: Paper | str) -> dict[str, Any] | None:
    """`Paper.to_json()`, or None for a scorer whose `paper` is a free string."""
    return paper.to_json() if isinstance(paper, Paper) else None
