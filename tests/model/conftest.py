"""Fixtures: the examples' models at small configs, as model files."""
from __future__ import annotations

from pathlib import Path

import pytest
from support.model_files import write_model_file


@pytest.fixture
def model_file(tmp_path):
    def write(name: str) -> Path:
        return write_model_file(tmp_path, name)

    return write
