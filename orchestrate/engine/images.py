"""Node images: build the project's own, find or pull a user's, refuse what cannot be had.

The node image is built from an official base image when it can be pulled, else offline: a
minimal Debian base made with debootstrap (from the host's own apt mirror) and ``docker
import``, and the Python wheels downloaded on the host. An offline build reaches nothing but
a throwaway wheel server on an internal network (:func:`wheel_server`), so the wheels never
become a layer and the Dockerfile stays one stage: no untagged image is left behind.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import io
import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Optional

from orchestrate.config.run_config import DEFAULT_IMAGE, PROJECT_ROOT
from orchestrate.config.torch_versions import DEFAULT_TORCH, UV_VERSION, torchvision_for
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.engine.labels import LAUNCHER_LABEL, OWNER_LABEL, OWNER_NAME_LABEL
from orchestrate.engine.locks import host_lock
from orchestrate.engine.owners import caller_uid, login_name, run_owner
from orchestrate.engine.remains import WHEEL_SERVER_LABEL, list_wheel_servers_left, remove_left
from orchestrate.engine.runs import launcher_identity
from orchestrate.errors import ImageNotFoundError, ImageUnavailableError
from orchestrate.text import first_line

log = logging.getLogger(__name__)

DOCKER_DIR = PROJECT_ROOT / "docker"
WHEELHOUSE_DIR = DOCKER_DIR / "wheelhouse"
DEFAULT_CPU_BASE = "python:3.11-slim-bookworm"
DEFAULT_GPU_BASE = "pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime"
# The image recipe: bumped when what the node image holds changes (2: iptables, for a link's loss
# where the kernel has no netem; 3: the exit guard skips the final garbage collections; 4: with
# a switch of its own, DDP_EXIT_FREEZE; 5: a C++ compiler, which torch.compile's inductor needs
# to build its CPU kernels, and Triton its GPU launchers; 6: the exit guard's pause is quiet when
# a signal's handler raises in it, as torchrun's agent's does on SIGTERM), so that an engine's
# older image is rebuilt rather than used.
IMAGE_RECIPE = "6"
RECIPE_LABEL = "io.ddp-compose.recipe"
# The offline base's own recipe: bumped when OFFLINE_PACKAGES change (2: iptables; 3: g++ and
# Python's headers, for torch.compile), so that an older base is rebuilt; a node image's change
# alone reuses the base.
BASE_RECIPE = "3"
OFFLINE_BASE = f"ddp-compose-base:bookworm-r{BASE_RECIPE}"
OFFLINE_SUITE = "bookworm"
# Debian bookworm's python3 is 3.11: the wheelhouse must match it, whatever the host runs.
OFFLINE_PYTHON_VERSION = "3.11"
# g++ and python3-dev: torch.compile's inductor compiles its CPU kernels as Python extensions.
OFFLINE_PACKAGES = ("python3", "python3-venv", "python3-dev", "g++", "procps", "iproute2", "iptables",
                    "ca-certificates")
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
    "any",
)
TORCH_LABEL = "io.ddp-compose.torch"

Progress = Callable[[str], None]


class BuildPath(str, Enum):
    """How an image's base was obtained."""

    OFFICIAL = "official"
    OFFLINE = "offline"


@dataclass(frozen=True)
class ImageBuild:
    """What was built, and how."""

    image: str
    base_image: str
    path: BuildPath
    seconds: float


def build_lock(image: str = "", progress: Optional[Callable[[str], None]] = None) -> Any:
    """Serialise image builds on this host: two runs that both miss an image build it once,
    and one build's clean-up never removes an image another build still needs. Builds take
    minutes: a second launch waits up to 30 minutes, saying for what."""
    return host_lock("build", f"the build of {image or 'an image'} by process {os.getpid()}", timeout_s=1800,
                     say=progress)


def image_current(client: Any, name: str) -> bool:
    """Whether the engine has ``name`` built by this checkout's recipe (an image the project
    did not build, with no recipe label, counts as current: it is the user's)."""
    import docker.errors

    try:
        labels = client.images.get(name).labels or {}
    except docker.errors.ImageNotFound:
        return False
    return labels.get(RECIPE_LABEL) == IMAGE_RECIPE or "io.ddp-compose.image" not in labels


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
    progress(f"pulling {name} ...")
    try:
        client.images.pull(name)
        return True
    except docker.errors.APIError as exc:
        progress(f"cannot pull {name}: {first_line(str(exc.explanation or exc))}")
        return False


def image_torch_version(client: Any, name: str) -> str:
    """The torch version a node image was built with (its label), or "" when unknown."""
    import docker.errors

    try:
        return client.images.get(name).labels.get(TORCH_LABEL, "")
    except docker.errors.ImageNotFound:
        return ""


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


def build_offline_base(client: Any, progress: Progress) -> None:
    """Make ``OFFLINE_BASE`` with debootstrap from the host's apt mirror, imported into the engine."""
    if shutil.which("debootstrap") is None:
        raise ImageUnavailableError(
            "the base image cannot be pulled and debootstrap is missing for the offline build:"
            " run scripts/setup.sh as root, or apt-get install debootstrap"
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
        import_rootfs(client, Path(rootfs), OFFLINE_BASE)


def import_rootfs(client: Any, rootfs: Path, image: str) -> None:
    """``tar -c rootfs`` streamed into the engine as ``image`` (``docker import``).

    The tar process is always ended: an import the engine refuses part way closes the pipe,
    and tar, which can then write no more, exits; it never waits on a reader that is gone.

    Raises:
        ImageUnavailableError: With the engine's or tar's reason.
    """
    repository, _, tag = image.partition(":")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert tar.stdout is not None
    try:
        client.api.import_image_from_stream(tar.stdout, repository=repository, tag=tag or None,
                                            changes=['CMD ["/bin/bash"]'])
    except engine_errors() as exc:
        raise ImageUnavailableError(f"importing {image} failed: {describe(exc)}") from None
    finally:
        tar.stdout.close()
        try:
            tar.wait(timeout=60)
        except subprocess.TimeoutExpired:
            tar.kill()
            tar.wait()
    if tar.returncode != 0:
        reason = first_line(tar.stderr.read().decode("utf-8", "replace")) if tar.stderr else ""
        raise ImageUnavailableError(f"tar of the base's root file system failed ({tar.returncode}): {reason}")


def download_wheels(requirements: list[str], wheelhouse: Path, progress: Progress, *,
                    python_version: str = OFFLINE_PYTHON_VERSION, cwd: Optional[Path] = None) -> None:
    """Download ``requirements`` (pip arguments) as Linux wheels for ``python_version``.

    Files already in ``wheelhouse`` are reused, so a second build downloads nothing. ``cwd``
    is where relative paths in the requirements are taken from.

    Raises:
        ImageUnavailableError: With pip's last error line.
    """
    wheelhouse.mkdir(parents=True, exist_ok=True)
    progress(f"downloading wheels into {wheelhouse} (reused on later builds) ...")
    argv = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
        "--progress-bar", "off", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", python_version,
        *[arg for plat in WHEEL_PLATFORMS for arg in ("--platform", plat)],
        *requirements, "-d", str(wheelhouse),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    errors: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line.startswith("ERROR"):
            errors.append(line)
        elif line.startswith(("Collecting", "Saved", "File was already downloaded")):
            progress(f"  {line.strip()[:140]}")
    if proc.wait() != 0:
        with contextlib.suppress(OSError):  # a cache that holds nothing is none: leave no empty folder behind
            wheelhouse.rmdir()  # (only an empty one goes)
        raise ImageUnavailableError(
            f"cannot download wheels ({' '.join(requirements)}): {errors[-1] if errors else 'pip failed'}"
        )


def build_context(files: dict[str, Path | bytes]) -> IO[bytes]:
    """A tar build context holding exactly ``files`` (arcname -> source file or content)."""
    spool = tempfile.TemporaryFile()
    with tarfile.open(fileobj=spool, mode="w") as tar:
        for arcname, source in files.items():
            data = source if isinstance(source, bytes) else Path(source).read_bytes()
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    spool.seek(0)
    return spool


@dataclass(frozen=True)
class WheelServer:
    """Where an offline build finds its wheels: the build joins ``network`` and reads ``url``."""

    network: str
    url: str
    host: str

    def buildargs(self) -> dict[str, str]:
        return {"WHEELS_URL": self.url, "WHEELS_HOST": self.host}


@contextlib.contextmanager
def wheel_server(client: Any, wheelhouse: Path, image: str, progress: Progress = print) -> Iterator[WheelServer]:
    """Serve ``wheelhouse`` over HTTP on a fresh internal network (no way out), for one build.

    The server is ``python3 -m http.server`` in a container of ``image`` (the build's own
    base, which has python3); the network and the container are removed afterwards. Both carry
    this launcher and its user: a build killed meanwhile leaves them running, and this user's next
    build removes them first, saying so (``prune`` does too; see :mod:`orchestrate.engine.remains`).
    """
    import docker.errors

    uid = caller_uid()
    for left in list_wheel_servers_left(client):  # this user's earlier builds, killed before their end
        if run_owner(left).launched_by(uid):
            if removed := remove_left(client, left):  # (none where another command came first)
                progress(f"removed the wheel server of an earlier build that was killed: {', '.join(removed)}")
    name = f"ddp-compose-wheels-{secrets.token_hex(4)}"
    labels = {WHEEL_SERVER_LABEL: name, LAUNCHER_LABEL: launcher_identity(),
              OWNER_LABEL: "" if uid is None else str(uid), OWNER_NAME_LABEL: "" if uid is None else login_name(uid)}
    network = client.networks.create(name, driver="bridge", internal=True, labels=labels)
    container = None
    try:
        container = client.containers.run(
            image, ["python3", "-m", "http.server", "8000", "--directory", "/wheels"],
            name=name, detach=True, entrypoint=[], network=name, labels=labels, user="0:0",
            volumes={str(wheelhouse.resolve()): {"bind": "/wheels", "mode": "ro"}},
        )
        yield WheelServer(name, f"http://{name}:8000/", name)
    finally:
        for remove in (lambda: container and container.remove(force=True), network.remove):
            try:
                remove()
            except docker.errors.APIError as exc:
                log.debug("removing wheel server %s: %s", name, exc)


def docker_build(
    client: Any,
    context: IO[bytes],
    tag: str,
    *,
    buildargs: dict[str, str],
    progress: Progress,
    network: Optional[str] = None,
    labels: Optional[dict[str, str]] = None,
    dockerfile: Optional[str] = None,
) -> None:
    """Build a tar ``context``, streaming its steps as progress; leave no untagged image of its own.

    Our Dockerfiles have one stage; a user's may have several, whose earlier stages the
    builder leaves as dangling images: those this build made (the step images in its own
    output, not the ones it took from the cache) are removed, and nothing else.

    Raises:
        ImageUnavailableError: With the build's first error line.
    """
    import docker.errors

    made: set[str] = set()
    cached = False
    try:
        stream = client.api.build(
            fileobj=context, custom_context=True, tag=tag, dockerfile=dockerfile,
            buildargs=buildargs, labels=labels, network_mode=network, rm=True, forcerm=True,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise ImageUnavailableError(f"building {tag} failed: {first_line(chunk['error'])}")
            text = chunk.get("stream", "").strip()
            cached = cached or text == "---> Using cache"
            step_image = _STEP_IMAGE.match(text)
            if step_image:
                if not cached:
                    made.add(step_image[1])
                cached = False
            if text.startswith(("Step ", "Successfully installed", "ERROR:")):
                progress(f"  {text[:160]}")
    except docker.errors.APIError as exc:
        raise ImageUnavailableError(f"building {tag} failed: {first_line(str(exc))}") from exc
    finally:
        context.close()
        remove_stage_images(client, made)


# A step's result in the classic builder's output: " ---> 1a2b3c4d5e6f".
_STEP_IMAGE = re.compile(r"^---> ([0-9a-f]{12})$")


def remove_stage_images(client: Any, made: set[str]) -> None:
    """Remove the untagged images that a build made (the stages of a multi-stage build); an
    image in use, or not this build's, stays."""
    if not made:
        return
    # the engine's own list: the SDK's images.list inspects each, and another client's image
    # removed in between would raise
    for image_id in client.api.images(filters={"dangling": True}, quiet=True):
        if image_id.split(":")[-1][:12] not in made:
            continue
        try:
            client.images.remove(image_id)
        except engine_errors() as exc:  # in use by a container, or already gone
            log.debug("removing stage image %s: %s", image_id[:19], exc)


def node_image_context() -> IO[bytes]:
    """The node image's build context: its Dockerfile and the exit guard, nothing else."""
    return build_context({"Dockerfile": DOCKER_DIR / "Dockerfile",
                          "ddp_compose_exit.py": DOCKER_DIR / "ddp_compose_exit.py"})


def torch_wheelhouse(torch_version: str) -> Path:
    """Where the host keeps the wheels of one torch version (reused by later builds and by
    the host venv, whose Python is usually the image's)."""
    return WHEELHOUSE_DIR / f"torch-{torch_version}"


def build_node_image(
    client: Any,
    image: str,
    *,
    torch_version: str = DEFAULT_TORCH,
    base_image: str = DEFAULT_CPU_BASE,
    offline: Optional[bool] = None,
    progress: Progress = print,
) -> ImageBuild:
    """Build the node image with ``torch_version``, by the official or the offline path.

    Args:
        client: A Docker SDK client.
        image: Tag of the image to build.
        torch_version: The torch release; its torchvision follows.
        base_image: The official base to build on when it can be had.
        offline: True forces the offline path, False forbids it, None tries the official
            base first and falls back to offline when it cannot be pulled.
        progress: Called with one line per step.

    Returns:
        What was built and which path was taken.

    Raises:
        ImageUnavailableError: When neither path can build the image.
    """
    torchvision = torchvision_for(torch_version)
    started = time.monotonic()
    buildargs = {"TORCH_VERSION": torch_version, "TORCHVISION_VERSION": torchvision, "RECIPE": IMAGE_RECIPE,
                 "UV_VERSION": UV_VERSION}
    if offline is not True and try_pull(client, base_image, progress):
        path, base = BuildPath.OFFICIAL, base_image
        progress(f"building {image} (torch {torch_version}, torchvision {torchvision}) on {base} ...")
        docker_build(client, node_image_context(), image,
                     buildargs={**buildargs, "BASE_IMAGE": base}, progress=progress)
    elif offline is False:
        raise ImageUnavailableError(f"base image {base_image} cannot be pulled and --online was given")
    else:
        path, base = BuildPath.OFFLINE, OFFLINE_BASE
        wheelhouse = torch_wheelhouse(torch_version)
        progress(f"using the offline path: base {OFFLINE_BASE}, wheels from {wheelhouse}")
        # The wheels download while debootstrap makes the base (both wait mostly on the network).
        # A failure of either is raised once the other has ended: nothing is left running.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ddp-wheels") as pool:
            wheels = pool.submit(download_wheels, [f"torch=={torch_version}", f"torchvision=={torchvision}",
                                                   f"uv=={UV_VERSION}"], wheelhouse, progress)
            if not image_exists(client, OFFLINE_BASE):
                build_offline_base(client, progress)
            wheels.result()
        progress(f"building {image} (torch {torch_version}, torchvision {torchvision}) on {base};"
                 " the build reaches only a wheel server for the host's wheels ...")
        with wheel_server(client, wheelhouse, base, progress) as server:
            docker_build(client, node_image_context(), image,
                         buildargs={**buildargs, "BASE_IMAGE": base, **server.buildargs()},
                         network=server.network, progress=progress)
    build = ImageBuild(image, base, path, time.monotonic() - started)
    progress(f"built {image} ({path.value} path, base {base}) in {build.seconds:.0f} s")
    return build


def ensure_image(client: Any, image: str, *, build_default: bool = True, progress: Progress = print) -> None:
    """Make sure ``image`` is present: the project's default is built, any other pulled.

    1. Present in the engine: use it.
    2. The project's default image (``ddp-compose-node:latest``), missing or built by an older
       recipe: build it, unless ``build_default`` is False.
    3. Any other image, missing: pull it.
    4. Otherwise refuse; nothing is built or tagged under a name the user chose.

    Raises:
        ImageUnavailableError: Naming the image and what to do.
    """
    present = image_exists(client, image)
    if present and (image != DEFAULT_IMAGE or image_current(client, image)):
        return
    if image == DEFAULT_IMAGE:
        why = "is older than this checkout's recipe" if present else "not found"
        if not build_default:
            raise ImageUnavailableError(
                f"node image {image} {why} and --no-build was given; build it with"
                " `python -m orchestrate image build`"
            )
        with build_lock(image, progress):
            if image_current(client, image):  # another run built it meanwhile
                return
            progress(f"node image {image} {why}; building it")
            build_node_image(client, image, progress=progress)
        return
    if try_pull(client, image, progress):
        return
    raise ImageNotFoundError(image, DEFAULT_IMAGE)


def image_label(client: Any, image: str, label: str) -> str:
    """One label of an image, "" when it has none or the engine cannot say."""
    try:
        return client.images.get(image).labels.get(label, "")
    except engine_errors() as exc:
        log.debug("labels of %s: %s", image, exc)
        return ""
