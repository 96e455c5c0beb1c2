"""Split names (DESIGN §2): `id/<name>`, `csid/<name>`, `ood/<group>/<name>`.

The role is the first component; for OOD splits every component between the role and the last
is the group (`ood/shift/sem3_cov1/x` has group `shift/sem3_cov1`). The file slug joins the
components with a double underscore: `ood/near/ssb_hard` -> `ood__near__ssb_hard`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from featstore.errors import UsageError

ROLES = ("id", "csid", "ood")
_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class SplitName:
    """A parsed split name."""

    name: str
    role: str
    group: str | None
    leaf: str

    @property
    def slug(self) -> str:
        """File-system name of the split: components joined by `__`."""
        return self.name.replace("/", "__")


def parse_split_name(name: str) -> SplitName:
    """Parse and validate a split name; raise UsageError naming what is expected."""
    parts = name.split("/")
    expected = "expected 'id/<name>', 'csid/<name>' or 'ood/<group>/<name>'"
    if parts[0] not in ROLES:
        raise UsageError(
            f"split name {name!r}: role {parts[0]!r} is not one of {ROLES}; {expected}"
        )
    if any(not _COMPONENT.match(p) or "__" in p for p in parts):
        raise UsageError(
            f"split name {name!r}: components must match [A-Za-z0-9][A-Za-z0-9_.+-]* without "
            f"'__'; {expected}"
        )
    role = parts[0]
    if role == "ood":
        if len(parts) < 3:
            raise UsageError(f"split name {name!r}: OOD splits need a group; {expected}")
        return SplitName(name, role, "/".join(parts[1:-1]), parts[-1])
    if len(parts) != 2:
        raise UsageError(f"split name {name!r}: {expected}")
    return SplitName(name, role, None, parts[1])
