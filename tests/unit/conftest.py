"""Unit tests never reach a real engine: the environment's points nowhere, and the tests that
need an engine are given the fake one (tests/fakes.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch, tmp_path_factory):
    missing = tmp_path_factory.getbasetemp() / "no-engine.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
