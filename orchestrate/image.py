"""Build the node image: from an official base image when it can be pulled, else offline.

The offline path makes a minimal Debian base with debootstrap (from the host's own apt
mirror) and ``docker import``, downloads the Python wheels on the host into
``docker/wheelhouse/``, and builds with no network inside the build.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable

from orchestrate.config import PROJECT_ROOT
from orchestrate.errors import ImageUnavailableError

log = logging.getLogger(__name__)

DOCKER_DIR = PROJECT_ROOT / "docker"
DEFAULT_CPU_BASE = "python:3.11-slim-bookworm"
DEFAULT_GPU_BASE = "pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime"
OFFLINE_BASE = "ddp-compose-base:bookworm"
OFFLINE_SUITE = "bookworm"
# Debian bookworm's python3 is 3.11: the wheelhouse must match it, whatever the host runs.
OFFLINE_PYTHON_VERSION = "3.11"
OFFLINE_PACKAGES = ("python3", "python3-venv", "procps", "iproute2", "ca-certificates")
WHEEL_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_25_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_18_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)

Progress = Callable[[str], None]


class BuildPath(str, Enum):
    """How the node image's base was obtained."""

    OFFICIAL = "official"
    OFFLINE = "offline"


@dataclass(frozen=True)
class ImageBuild:
    """What was built, and how."""

    image: str
    base_image: str
    path: BuildPath
    seconds: float


def image_exists(client: Any, name: str) -> bool:
    """Return whether the engine has an image called ``name``."""
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def try_pull(client: Any, name: str, progress: Progress) -> bool:
    """Pull ``name`` if the engine can reach a registry; return whether it is now present."""
    import docker.errors

    if image_exists(client, name):
        return True
    progress(f"pulling base image {name} ...")
    try:
        client.images.pull(name)
        return True
    except docker.errors.APIError as exc:
        progress(f"cannot pull {name}: {first_line(str(exc.explanation or exc))}")
        return False


def first_line(text: str) -> str:
    """Return the first non-empty line of ``text``."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def host_apt_mirror() -> str:
    """Return the Debian mirror the host's apt uses (its ``URIs:``/``deb`` line).

    Raises:
        ImageUnavailableError: When the host has no Debian apt source.
    """
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for match in re.finditer(r"^URIs:\s*(\S+)", path.read_text(), re.M):
            uri = match.group(1)
            if "security" not in uri:
                return uri
    legacy = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in legacy:
        if path.exists():
            for match in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", path.read_text(), re.M):
                if "security" not in match.group(1):
                    return match.group(1)
    raise ImageUnavailableError(
        "offline build needs a Debian apt mirror on the host (none in /etc/apt/sources*)"
    )


def build_offline_base(progress: Progress) -> None:
    """Make ``OFFLINE_BASE`` with debootstrap from the host's apt mirror and docker import."""
    if shutil.which("debootstrap") is None:
        raise ImageUnavailableError(
            "node image base cannot be pulled and debootstrap is missing for the offline build"
            " (apt-get install debootstrap)"
        )
    if os.geteuid() != 0:
        raise ImageUnavailableError("the offline base build (debootstrap) must run as root")
    mirror = host_apt_mirror()
    progress(f"offline base: debootstrap {OFFLINE_SUITE} from {mirror} (about a minute) ...")
    with tempfile.TemporaryDirectory(prefix="ddp-rootfs-") as rootfs:
        proc = subprocess.run(
            [
                "debootstrap", "--variant=minbase", f"--include={','.join(OFFLINE_PACKAGES)}",
                OFFLINE_SUITE, rootfs, mirror,
            ],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            tail = first_line("\n".join(reversed((proc.stdout + proc.stderr).splitlines())))
            raise ImageUnavailableError(f"debootstrap failed: {tail}")
        shutil.rmtree(Path(rootfs) / "var/cache/apt/archives", ignore_errors=True)
        progress(f"offline base: importing rootfs as {OFFLINE_BASE} ...")
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(
            ["docker", "import", "--change", 'CMD ["/bin/bash"]', "-", OFFLINE_BASE],
            stdin=tar.stdout, capture_output=True, text=True,
        )
        tar.wait()
        if imp.returncode != 0:
            raise ImageUnavailableError(f"docker import failed: {first_line(imp.stderr)}")


def download_wheelhouse(wheelhouse: Path, progress: Progress) -> None:
    """Download the node requirements as wheels for the offline base's Python."""
    requirements = DOCKER_DIR / "requirements-node.txt"
    progress(f"downloading wheels for the node image into {wheelhouse} ...")
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--implementation", "cp",
        "--python-version", OFFLINE_PYTHON_VERSION,
        *[arg for plat in WHEEL_PLATFORMS for arg in ("--platform", plat)],
        "-r", str(requirements), "-d", str(wheelhouse),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
        raise ImageUnavailableError(
            f"cannot download the node image's wheels: {errors[-1] if errors else first_line(proc.stderr)}"
        )


def docker_build(
    client: Any, image: str, base_image: str, *, offline: bool, progress: Progress
) -> None:
    """Build ``docker/Dockerfile`` on ``base_image``, streaming its steps as progress."""
    import docker.errors

    buildargs = {"BASE_IMAGE": base_image, "USE_WHEELHOUSE": "1" if offline else "0"}
    progress(f"building {image} on {base_image} ...")
    try:
        stream = client.api.build(
            path=str(DOCKER_DIR),
            tag=image,
            buildargs=buildargs,
            network_mode="none" if offline else None,
            rm=True,
            forcerm=True,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise ImageUnavailableError(f"building {image} failed: {first_line(chunk['error'])}")
            text = chunk.get("stream", "").strip()
            if text.startswith("Step "):
                progress(f"  {text}")
    except docker.errors.APIError as exc:
        raise ImageUnavailableError(f"building {image} failed: {first_line(str(exc))}") from exc


def build_node_image(
    client: Any,
    image: str,
    *,
    base_image: str = DEFAULT_CPU_BASE,
    offline: bool | None = None,
    progress: Progress = print,
) -> ImageBuild:
    """Build the node image, choosing the official or the offline path.

    Args:
        client: A Docker SDK client.
        image: Tag of the image to build.
        base_image: The official base to build on when it can be had.
        offline: True forces the offline path, False forbids it, None tries the official
            base first and falls back to offline when it cannot be pulled.
        progress: Called with one line per step.

    Returns:
        What was built and which path was taken.

    Raises:
        ImageUnavailableError: When neither path can build the image.
    """
    started = time.monotonic()
    if offline is not True and try_pull(client, base_image, progress):
        path, base = BuildPath.OFFICIAL, base_image
    elif offline is False:
        raise ImageUnavailableError(f"base image {base_image} cannot be pulled and --online was given")
    else:
        path, base = BuildPath.OFFLINE, OFFLINE_BASE
        progress(f"using the offline path: base {OFFLINE_BASE}, wheels from docker/wheelhouse/")
        if not image_exists(client, OFFLINE_BASE):
            build_offline_base(progress)
        download_wheelhouse(DOCKER_DIR / "wheelhouse", progress)
    docker_build(client, image, base, offline=path is BuildPath.OFFLINE, progress=progress)
    build = ImageBuild(image, base, path, time.monotonic() - started)
    progress(f"built {image} ({path.value} path, base {base}) in {build.seconds:.0f} s")
    return build


def ensure_node_image(client: Any, image: str, progress: Progress = print, **kwargs: Any) -> None:
    """Make sure ``image`` exists, building it when it is missing."""
    if image_exists(client, image):
        return
    progress(f"node image {image} not found; building it (first run only)")
    build_node_image(client, image, progress=progress, **kwargs)
