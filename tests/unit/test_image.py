from __future__ import annotations

import time

import pytest

import orchestrate.engine.images as image
from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.config.torch_versions import UV_VERSION
from orchestrate.errors import ImageUnavailableError
from tests.fakes import FakeDockerClient


@pytest.fixture
def builds(monkeypatch):
    """Record node image builds instead of running them."""
    calls = []
    monkeypatch.setattr(image, "build_node_image", lambda client, tag, **kw: calls.append(tag) or client.images.add(tag))
    return calls


def test_a_present_image_is_used_as_it_is(builds):
    client = FakeDockerClient()
    client.images.add("my/image:1")
    image.ensure_image(client, "my/image:1", progress=lambda _: None)
    assert builds == [] and not [c for c in client.calls if c[0] == "images.pull"]


def test_a_missing_custom_image_is_pulled(builds):
    client = FakeDockerClient()
    client.images.pullable = {"my/image:1"}
    image.ensure_image(client, "my/image:1", progress=lambda _: None)
    assert ("images.pull", "my/image:1") in client.calls and builds == []


def test_a_custom_image_that_cannot_be_pulled_is_refused_and_nothing_is_built(builds):
    client = FakeDockerClient()
    with pytest.raises(ImageUnavailableError, match="my/image:1 is not in the engine and cannot be pulled"):
        image.ensure_image(client, "my/image:1", progress=lambda _: None)
    assert builds == []
    assert "my/image:1" not in client.images.by_name


def test_only_the_default_image_is_built_on_first_use(builds):
    client = FakeDockerClient()
    image.ensure_image(client, DEFAULT_IMAGE, progress=lambda _: None)
    assert builds == [DEFAULT_IMAGE]


def test_the_default_image_is_not_built_with_no_build(builds):
    with pytest.raises(ImageUnavailableError, match="--no-build was given"):
        image.ensure_image(FakeDockerClient(), DEFAULT_IMAGE, build_default=False, progress=lambda _: None)
    assert builds == []


def test_build_context_holds_exactly_the_given_files(tmp_path):
    import tarfile

    (tmp_path / "Dockerfile").write_text("FROM x\n")
    with tarfile.open(fileobj=image.build_context({"Dockerfile": tmp_path / "Dockerfile", "r.txt": b"six\n"})) as tar:
        assert sorted(tar.getnames()) == ["Dockerfile", "r.txt"]
        assert tar.extractfile("r.txt").read() == b"six\n"


def test_a_default_image_of_an_older_recipe_is_rebuilt_and_a_current_one_used(builds):
    client = FakeDockerClient()
    client.images.add(DEFAULT_IMAGE, **{"io.ddp-compose.image": "node", "io.ddp-compose.recipe": "1"})
    said = []
    image.ensure_image(client, DEFAULT_IMAGE, progress=said.append)
    assert builds == [DEFAULT_IMAGE]
    assert said == [f"node image {DEFAULT_IMAGE} is older than this checkout's recipe; building it"]
    client.images.add(DEFAULT_IMAGE, **{"io.ddp-compose.image": "node", "io.ddp-compose.recipe": image.IMAGE_RECIPE})
    image.ensure_image(client, DEFAULT_IMAGE, progress=said.append)
    assert builds == [DEFAULT_IMAGE]  # current: used as it is
    with pytest.raises(ImageUnavailableError, match="is older than this checkout's recipe and --no-build was given"):
        client.images.add(DEFAULT_IMAGE, **{"io.ddp-compose.image": "node"})  # from before recipes were labelled
        image.ensure_image(client, DEFAULT_IMAGE, build_default=False, progress=said.append)


def test_an_image_the_project_did_not_build_counts_as_current_and_the_offline_base_follows_the_recipe():
    client = FakeDockerClient()
    client.images.add("my/node:1")
    assert image.image_current(client, "my/node:1") and not image.image_current(client, "missing:1")
    assert image.OFFLINE_BASE.endswith(f"-r{image.BASE_RECIPE}") and "iptables" in image.OFFLINE_PACKAGES
    assert {"g++", "python3-dev"} <= set(image.OFFLINE_PACKAGES)  # torch.compile builds its kernels with them
    dockerfile = (image.DOCKER_DIR / "Dockerfile").read_text()
    assert f"ARG RECIPE={image.IMAGE_RECIPE}" in dockerfile and "iptables" in dockerfile and "g++" in dockerfile


def test_the_offline_build_downloads_its_installer_with_the_wheels_and_passes_its_pin(monkeypatch, tmp_path):
    """uv installs the offline image's wheels: it must be in the wheelhouse the build reads,
    at the pin the build is told."""
    import contextlib

    downloaded, built = [], []
    monkeypatch.setattr(image, "try_pull", lambda client, name, progress: False)
    monkeypatch.setattr(image, "image_exists", lambda client, name: True)
    monkeypatch.setattr(image, "download_wheels", lambda reqs, house, progress: downloaded.extend(reqs))
    server = image.WheelServer("net", "http://wheels:8000/", "wheels")
    monkeypatch.setattr(image, "wheel_server", lambda client, house, base, progress: contextlib.nullcontext(server))
    monkeypatch.setattr(image, "docker_build", lambda client, context, tag, **kw: built.append(kw["buildargs"]))
    image.build_node_image(FakeDockerClient(), "ddp-compose-node:t", torch_version="2.9.1", progress=lambda _: None)
    assert downloaded == ["torch==2.9.1", "torchvision==0.24.1", f"uv=={UV_VERSION}"]
    assert built[0]["UV_VERSION"] == UV_VERSION and built[0]["WHEELS_URL"] == "http://wheels:8000/"


def test_the_wheels_download_while_the_base_is_made_and_a_failure_waits_for_the_other(monkeypatch):
    """debootstrap and the wheel download overlap; a base that fails is raised only after the
    download has ended, so no thread or pip is left running."""
    import contextlib
    import threading

    downloading, making_base, ended = threading.Event(), threading.Event(), []
    monkeypatch.setattr(image, "try_pull", lambda client, name, progress: False)
    monkeypatch.setattr(image, "image_exists", lambda client, name: False)

    def download(reqs, house, progress):
        downloading.set()
        assert making_base.wait(10), "the base was not made while the wheels downloaded"
        time.sleep(0.3)
        ended.append("wheels")

    def base(client, progress):
        making_base.set()
        assert downloading.wait(10), "the wheels did not download while the base was made"
        raise ImageUnavailableError("debootstrap failed: no mirror")

    monkeypatch.setattr(image, "download_wheels", download)
    monkeypatch.setattr(image, "build_offline_base", base)
    monkeypatch.setattr(image, "wheel_server", lambda client, house, b, progress: contextlib.nullcontext())
    with pytest.raises(ImageUnavailableError, match="debootstrap failed"):
        image.build_node_image(FakeDockerClient(), "ddp-compose-node:t", progress=lambda _: None)
    assert ended == ["wheels"]


def test_a_failed_wheel_download_leaves_no_empty_wheelhouse_behind_but_keeps_one_that_holds_wheels(monkeypatch,
                                                                                                  tmp_path):
    class FailedPip:  # pip download that found no distribution
        def __init__(self, argv, **kwargs):
            self.stdout = iter(["Collecting nope==1.0\n", "ERROR: No matching distribution found for nope==1.0\n"])

        def wait(self):
            return 1

    monkeypatch.setattr(image.subprocess, "Popen", FailedPip)
    fresh = tmp_path / "user-1"
    with pytest.raises(ImageUnavailableError, match="No matching distribution found for nope==1.0"):
        image.download_wheels(["nope==1.0"], fresh, lambda line: None)
    assert not fresh.exists()
    used = tmp_path / "user-2"
    used.mkdir()
    (used / "numpy-2.0-cp311-manylinux.whl").write_bytes(b"wheel")
    with pytest.raises(ImageUnavailableError):
        image.download_wheels(["nope==1.0"], used, lambda line: None)
    assert [p.name for p in used.iterdir()] == ["numpy-2.0-cp311-manylinux.whl"]  # a cache of earlier builds stays
