"""The test session's one run of the real demo (tests/conftest.py `demo_json_run`,
`demo_rerun`): its scale and what a rerun in its directory is compared with."""

from __future__ import annotations

from dataclasses import dataclass

from tests.helpers.cli import CliRun

#: the test session's demo runs at this share of the demo's evaluation images (`featstore demo
#: --scale`; id/train stays whole): the default pretrained backbone with ~2,500 instead of
#: ~4,000 extracted images
DEMO_TEST_SCALE = 0.5


@dataclass(frozen=True)
class DemoRerun:
    """The rerun and what DIR held just before it: store.json and model.json (parsed), and
    the bytes of model.pt."""

    run: CliRun
    manifest_before: dict
    record_before: dict
    weights_before: bytes
