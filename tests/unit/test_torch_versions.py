from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrate.config.torch_versions import DEFAULT_TORCH, UV_VERSION, torchvision_for
from orchestrate.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("torch, vision", [("2.9.1", "0.24.1"), ("2.14.1", "0.29.1"), ("2.10.0", "0.25.0")])
def test_torchvision_follows_torch(torch, vision):
    assert torchvision_for(torch) == vision


@pytest.mark.parametrize("bad", ["3.0.0", "2.9", "latest", "2.9.1+cpu"])
def test_unknown_torch_versions_are_refused(bad):
    with pytest.raises(UsageError, match="--torch must be a torch release like"):
        torchvision_for(bad)


def test_host_venv_image_and_dockerfile_share_one_pin():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"torch=={DEFAULT_TORCH}"' in pyproject
    assert f'"torchvision=={torchvision_for(DEFAULT_TORCH)}"' in pyproject
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert re.search(rf"^ARG TORCH_VERSION={re.escape(DEFAULT_TORCH)}$", dockerfile, re.M)
    assert re.search(rf"^ARG TORCHVISION_VERSION={re.escape(torchvision_for(DEFAULT_TORCH))}$", dockerfile, re.M)
    # the installer too: a plain `docker build` of the offline path uses the project's uv
    assert re.search(rf"^ARG UV_VERSION={re.escape(UV_VERSION)}$", dockerfile, re.M)
