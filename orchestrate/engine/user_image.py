"""The user's dependencies: a node image derived from ``--requirements`` and a ``Dockerfile``.

A derived image is tagged by a digest of its inputs (the base image's id, the requirements
file, the Dockerfile and the files of its build context), so it is built once and reused
while nothing changed. Requirements are installed from the package index when a container
can reach it, else from a wheelhouse downloaded on the host and a build with no network,
exactly like the node image. The plan (:func:`derived_image_spec`) is pure; the build
(:func:`ensure_derived_image`) talks to the engine.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from orchestrate.config.run_config import RunConfig
from orchestrate.engine.images import (
    WHEELHOUSE_DIR,
    Progress,
    build_context,
    build_lock,
    docker_build,
    download_wheels,
    image_exists,
    wheel_server,
)
from orchestrate.errors import ImageUnavailableError, UsageError
from orchestrate.text import first_line

log = logging.getLogger(__name__)

DERIVED_REPOSITORY = "ddp-compose-user"
DERIVED_LABEL = "io.ddp-compose.derived-from"
DOCKERFILE_NAME = "Dockerfile"
INDEX_URL = "https://pypi.org/simple/"
# One stage: offline builds read the host's wheels from a wheel server (WHEELS_URL) on an
# internal network, so the wheels never become a layer.
REQUIREMENTS_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG WHEELS_URL=
ARG WHEELS_HOST=
COPY requirements.txt /tmp/ddp-user/requirements.txt
RUN if [ -n "$WHEELS_URL" ]; then set -- --no-index --find-links "$WHEELS_URL" --trusted-host "$WHEELS_HOST"; fi \\
 && python3 -m pip install --no-cache-dir --disable-pip-version-check --progress-bar off "$@" \\
        -r /tmp/ddp-user/requirements.txt \\
 && rm -rf /tmp/ddp-user
"""
# What a container of the base image answers: its Python version and whether it can reach
# the package index.
PROBE = f"""
import sys, urllib.request
print("%d.%d" % sys.version_info[:2])
try:
    urllib.request.urlopen("{INDEX_URL}", timeout=5)
    print("online")
except Exception:
    print("offline")
"""
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)", re.I | re.M)


@dataclass(frozen=True)
class DerivedImageSpec:
    """What a derived node image is made of.

    Attributes:
        base: The node image it starts from.
        requirements: A pip requirements file, installed first.
        dockerfile: A Dockerfile built on top (``FROM ${BASE_IMAGE}`` or ``FROM`` the node image).
        context: The Dockerfile's build context: the work directory.
        excluded: Paths under the context never sent (the runs directory).
    """

    base: str
    requirements: Optional[Path] = None
    dockerfile: Optional[Path] = None
    context: Optional[Path] = None
    excluded: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [self.base]
        if self.requirements:
            parts.append(f"+ pip install -r {self.requirements}")
        if self.dockerfile:
            parts.append(f"+ {self.dockerfile}")
        return " ".join(parts)


def derived_image_spec(config: RunConfig) -> Optional[DerivedImageSpec]:
    """The derived image a run needs, or None when the node image itself will do (pure)."""
    if config.requirements is None and config.dockerfile is None:
        return None
    excluded: tuple[str, ...] = ()
    if config.dockerfile is not None:
        check_dockerfile_base(config.dockerfile.read_text(errors="replace"), config.image, config.dockerfile,
                              requirements=config.requirements is not None)
        try:
            excluded = (str(config.runs_dir.relative_to(config.workdir)),)
        except ValueError:
            excluded = ()
    return DerivedImageSpec(config.image, config.requirements, config.dockerfile,
                            config.workdir if config.dockerfile else None, excluded)


def check_dockerfile_base(text: str, node_image: str, path: Path, requirements: bool = False) -> None:
    """Refuse a Dockerfile whose first stage does not start from the node image; with
    ``--requirements``, one that names the node image itself, which would build past the
    requirements' layer (``FROM ${BASE_IMAGE}`` is that layer then).

    Raises:
        UsageError: With the accepted forms.
    """
    match = _FROM.search(text)
    base = match["image"] if match else ""
    if base in ("${BASE_IMAGE}", "$BASE_IMAGE"):
        return
    if base == node_image and not requirements:
        return
    if base == node_image:
        raise UsageError(
            f"{path} starts FROM {node_image}, which leaves out what --requirements installs: start it with"
            f" `ARG BASE_IMAGE` and `FROM ${{BASE_IMAGE}}` to build on both; pass --no-dockerfile to ignore it"
        )
    raise UsageError(
        f"{path} must build on the node image: start it with `ARG BASE_IMAGE` and"
        f" `FROM ${{BASE_IMAGE}}` (or `FROM {node_image}`), found FROM {base or 'nothing'};"
        " pass --no-dockerfile to ignore it"
    )


def copied_sources(dockerfile_text: str) -> Optional[list[str]]:
    """What the Dockerfile's ``COPY``/``ADD`` take from the build context (pure).

    Returns:
        The source paths or patterns (``.`` for everything); an empty list when it copies
        nothing from the context (``COPY --from=`` copies from a stage); None when it cannot
        be read (then every file counts).
    """
    sources: list[str] = []
    for line in re.sub(r"\\\n", " ", dockerfile_text).splitlines():
        keyword, _, rest = line.strip().partition(" ")
        if keyword.upper() not in ("COPY", "ADD"):
            continue
        flags = []
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        if any(flag.startswith("--from") for flag in flags):
            continue
        try:
            args = json.loads(rest) if rest.startswith("[") else rest.split()
        except ValueError:
            return None
        if len(args) < 2:
            return None
        sources += [os.path.normpath(a.lstrip("/")) if a.strip("/") else "." for a in args[:-1]]
    return sources


def context_files(context: Path, dockerfile: Path, excluded: tuple[str, ...]) -> list[str]:
    """The files of the build context, as Docker would send them (``.dockerignore`` applies)."""
    from docker.utils.build import exclude_paths

    ignore = context / ".dockerignore"
    patterns = [ln.strip() for ln in ignore.read_text().splitlines()
                if ln.strip() and not ln.startswith("#")] if ignore.exists() else []
    patterns += [p for e in excluded for p in (e, f"{e}/**")]
    try:
        relative = str(dockerfile.relative_to(context))
    except ValueError:
        relative = None
    return sorted(exclude_paths(str(context), patterns, dockerfile=relative))


def files_copied(files: list[str], sources: Optional[list[str]]) -> list[str]:
    """The context files a build can see through its COPY/ADD sources (all when unknown)."""
    import fnmatch

    if sources is None or "." in sources:
        return files
    chosen = []
    for name in files:
        for source in sources:
            if name == source or name.startswith(source.rstrip("/") + "/") or fnmatch.fnmatchcase(name, source):
                chosen.append(name)
                break
    return chosen


def inputs_digest(base_id: str, requirements: Optional[bytes], dockerfile: Optional[bytes],
                  files: list[tuple[str, int, int]]) -> str:
    """A digest of everything a derived image is built from (pure).

    Args:
        base_id: The base image's id (a rebuilt base gives a new digest).
        requirements: The requirements file's bytes.
        dockerfile: The Dockerfile's bytes.
        files: (path, size, mtime in ns) of every context file the Dockerfile copies.
    """
    digest = hashlib.sha256()
    for part in (base_id.encode(), requirements or b"-", dockerfile or b"-"):
        digest.update(hashlib.sha256(part).digest())
    for path, size, mtime in files:
        digest.update(f"{path}\0{size}\0{mtime}\n".encode())
    return digest.hexdigest()[:16]


def derived_tag(digest: str) -> str:
    return f"{DERIVED_REPOSITORY}:{digest}"


def probe_base(client: Any, image: str) -> tuple[str, bool]:
    """Ask a throwaway container of ``image`` for its Python version and index access."""
    import docker.errors

    try:
        out = client.containers.run(image, ["python3", "-c", PROBE], remove=True, entrypoint=[])
    except docker.errors.DockerException as exc:
        raise ImageUnavailableError(f"cannot run python3 in {image}: {first_line(str(exc))}") from None
    lines = out.decode("utf-8", "replace").split()
    return lines[0], lines[-1] == "online"


def refers_to_local_files(requirements_text: str) -> bool:
    """Whether requirements name host paths (``--find-links DIR``, ``./pkg``, ``file:``, ``-e``),
    which only mean something on the host."""
    for line in requirements_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if re.match(r"^(-f|--find-links|-e|--editable|-r|--requirement|-c|--constraint)\b", line):
            return True
        if line.startswith((".", "/", "~")) or "file:" in line:
            return True
    return False


def build_requirements_layer(client: Any, base: str, requirements: Path, tag: str,
                             progress: Progress) -> None:
    """Build ``tag``: ``base`` plus ``pip install -r requirements``.

    Installed from the package index when a container can reach it; otherwise, and whenever
    the requirements name host paths, from wheels the host downloads for the image's Python.
    """
    python, online = probe_base(client, base)
    text = requirements.read_text()
    wheelhouse: Optional[Path] = None
    if online and not refers_to_local_files(text):
        progress(f"installing {requirements.name} from the package index")
    else:
        why = "they name host paths" if online else "no package index is reachable from the nodes"
        digest = hashlib.sha256(text.encode() + python.encode()).hexdigest()[:12]
        wheelhouse = WHEELHOUSE_DIR / f"user-{digest}"
        progress(f"{why}: wheels for Python {python} from the host")
        download_wheels_for(requirements, python, wheelhouse, progress)
    context = build_context({"Dockerfile": REQUIREMENTS_DOCKERFILE.encode(), "requirements.txt": requirements})
    buildargs = {"BASE_IMAGE": base}
    labels = {DERIVED_LABEL: base}
    if wheelhouse is None:
        docker_build(client, context, tag, buildargs=buildargs, labels=labels, progress=progress)
        return
    with wheel_server(client, wheelhouse, base, progress) as server:
        docker_build(client, context, tag, buildargs={**buildargs, **server.buildargs()}, labels=labels,
                     network=server.network, progress=progress)


def download_wheels_for(requirements: Path, python: str, wheelhouse: Path, progress: Progress) -> None:
    """Host-side ``pip download`` for the image's Python, run beside the requirements file so
    that its relative paths (``--find-links wheels``, ``./pkg``) mean what they mean there."""
    download_wheels(["-r", str(requirements)], wheelhouse, progress, python_version=python,
                    cwd=requirements.parent)


def build_dockerfile_layer(client: Any, base: str, spec: DerivedImageSpec, files: list[str], tag: str,
                           progress: Progress) -> None:
    """Build the user's Dockerfile with ``BASE_IMAGE=base`` in its work-directory context."""
    from docker.utils.build import create_archive

    assert spec.dockerfile is not None and spec.context is not None
    try:
        relative = str(spec.dockerfile.relative_to(spec.context))
        extra: list[tuple[str, str]] = []
    except ValueError:  # a Dockerfile outside the context travels with it
        relative = ".ddp-compose.Dockerfile"
        extra = [(relative, spec.dockerfile.read_text())]
    progress(f"building {spec.dockerfile} ({len(files)} files in the context {spec.context})")
    context = create_archive(root=str(spec.context), files=files, extra_files=extra)
    docker_build(client, context, tag, dockerfile=relative, progress=progress,
                 buildargs={"BASE_IMAGE": base}, labels={DERIVED_LABEL: base})


def ensure_derived_image(client: Any, spec: DerivedImageSpec, progress: Progress) -> str:
    """Return the tag of the derived image, building it only when its inputs changed.

    Raises:
        ImageUnavailableError: When a build fails.
    """
    base_id = client.images.get(spec.base).id
    files: list[str] = []
    stats: list[tuple[str, int, int]] = []
    if spec.dockerfile is not None and spec.context is not None:
        files = context_files(spec.context, spec.dockerfile, spec.excluded)
        # Only what the Dockerfile copies counts: the job's own outputs in the work directory
        # (checkpoints, data, logs) must not force a rebuild on every run.
        for name in files_copied(files, copied_sources(spec.dockerfile.read_text(errors="replace"))):
            st = (spec.context / name).stat()
            stats.append((name, st.st_size, st.st_mtime_ns))
    digest = inputs_digest(
        base_id,
        spec.requirements.read_bytes() if spec.requirements else None,
        spec.dockerfile.read_bytes() if spec.dockerfile else None,
        stats,
    )
    tag = derived_tag(digest)
    with build_lock(tag, progress):
        if image_exists(client, tag):
            progress(f"reusing {tag} ({spec.describe()}; nothing changed)")
            return tag
        build_derived(client, spec, files, tag, progress)
    return tag


def build_derived(client: Any, spec: DerivedImageSpec, files: list[str], tag: str, progress: Progress) -> None:
    """Build the layers of ``spec`` under ``tag``: requirements first, then the Dockerfile."""
    progress(f"building {tag}: {spec.describe()}")
    base = spec.base
    if spec.requirements is not None:
        layer = tag if spec.dockerfile is None else f"{tag}-requirements"
        build_requirements_layer(client, base, spec.requirements, layer, progress)
        base = layer
    if spec.dockerfile is not None:
        try:
            build_dockerfile_layer(client, base, spec, files, tag, progress)
        finally:
            if base != spec.base:
                untag(client, base)
    progress(f"built {tag}")


def untag(client: Any, tag: str) -> None:
    """Drop an intermediate tag (its layers stay while the final image uses them)."""
    import docker.errors

    try:
        client.images.remove(tag, noprune=False)
    except docker.errors.APIError as exc:
        log.debug("removing %s: %s", tag, exc)


def remove_unused_derived_images(client: Any, say: Progress) -> list[str]:
    """``image prune``: remove the derived images (``ddp-compose-user:<digest>``) that no container
    uses, a stopped one's included: each change of a requirements file or a Dockerfile leaves the
    one built before it. One the engine refuses to remove (a run began to use it meanwhile) is
    said and kept; one another client removed meanwhile is gone all the same.

    Returns:
        The tags removed.

    Raises:
        EngineError: Where the engine cannot list its images or containers.
    """
    from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
    from orchestrate.errors import EngineError

    try:
        containers = client.containers.list(all=True, ignore_removed=True)
        used = {name for c in containers for name in (c.attrs.get("Config", {}).get("Image", ""), c.attrs.get("Image"))}
        # (the engine's own list: the SDK's inspects each image, and one removed meanwhile would raise)
        images = client.api.images(filters={"label": DERIVED_LABEL})
    except engine_errors() as exc:
        raise EngineError(f"cannot list the derived images: {describe(exc)}") from None
    removed = []
    for image in images:
        names = image.get("RepoTags") or []
        tags = sorted(t for t in names if t.startswith(f"{DERIVED_REPOSITORY}:"))
        if not tags or image["Id"] in used or any(t in used for t in names):
            continue
        for tag in tags:  # by name: the engine refuses an id that more than one tag names
            try:
                client.images.remove(tag)
            except engine_errors() as exc:
                if classify(exc) is not EngineFault.NOT_FOUND:  # (gone meanwhile: removed all the same)
                    say(f"kept {tag}: {describe(exc)}")
                    continue
            removed.append(tag)
    return removed
