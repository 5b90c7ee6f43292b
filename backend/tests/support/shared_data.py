"""The benchmark data some tests read: `../shared/data` beside the checkout (README, "Tests"), read
where it lies and never copied into the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import REPO_ROOT

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def shared_dataset(name: str) -> Path:
    """The folder of one data set; a failure that says where it was looked for when it is missing."""
    folder = SHARED_DATA / name
    if not folder.is_dir():
        pytest.fail(f"{folder} is missing: these tests read the benchmark data from ../shared/data "
                    "beside the checkout", pytrace=False)
    return folder
