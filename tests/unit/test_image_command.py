"""``image build`` in process: what it asks the library to build (tag, torch, base, path), what it
refuses before the engine is asked, and what it prints. The build itself is engine/images.py's
(test_image.py); test_cli.py holds the same refusals in a subprocess, as a user meets them."""
from __future__ import annotations

import io
import json

import pytest

from orchestrate.cli.main import main
from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.config.torch_versions import DEFAULT_TORCH
from orchestrate.engine.images import DEFAULT_CPU_BASE, IMAGE_RECIPE, RECIPE_LABEL
from tests.fakes import FakeDockerClient


class FlushedOutput(io.StringIO):
    """Standard output that notes what had been written at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[str] = []

    def flush(self) -> None:
        self.flushed_at.append(self.getvalue())


@pytest.fixture
def builds(monkeypatch):
    """Each build asked of the library: (client, tag, its options); it says one line of progress,
    and the image is then in the engine."""
    asked = []

    def build(client, tag, **options):
        asked.append((client, tag, {k: v for k, v in options.items() if k != "progress"}))
        options["progress"]("base made")
        client.images.add(tag)
    monkeypatch.setattr("orchestrate.engine.images.build_node_image", build)
    return asked


def image_build(*words: str, client=None, out=None) -> int:
    return main(["image", "build", *words], out=out if out is not None else io.StringIO(), client=client)


def test_image_alone_says_its_actions_in_one_line_and_exits_2(builds, capsys):
    out = io.StringIO()
    assert main(["image"], out=out) == 2
    assert capsys.readouterr().err == "error: image needs an ACTION: build or prune (see python -m orchestrate image" \
                                      " --help)\n" and builds == []


def test_image_prune_removes_the_derived_images_no_container_uses_and_says_each(capsys):
    # each change of a Dockerfile left the image built before it, 7.7 GB listed, with no way but docker rmi
    from orchestrate.engine.user_image import DERIVED_LABEL
    from tests.fakes import FakeContainer

    client = FakeDockerClient()
    client.images.add(DEFAULT_IMAGE, **{"io.ddp-compose.image": "node"})
    for digest in ("aaa", "bbb", "ccc"):
        client.images.add(f"ddp-compose-user:{digest}", **{DERIVED_LABEL: DEFAULT_IMAGE})
    client.images.add("someone/else:1", **{DERIVED_LABEL: "x"})  # their label, not our repository: not ours
    tagged_too = client.images.add("ddp-compose-user:ddd", **{DERIVED_LABEL: DEFAULT_IMAGE})
    tagged_too.tags.append("me/kept:1")  # the user tagged it too: ours goes, theirs stays (by id, the engine refuses)
    client.images.by_name["me/kept:1"] = tagged_too
    stopped = FakeContainer(client, "stopped-run-node0", {"image": "ddp-compose-user:bbb"})  # a stopped run's
    client.containers_by_name[stopped.name] = stopped
    vanished = client.images.by_name["ddp-compose-user:ccc"]
    client.images.vanishing.append(vanished)  # removed by another client between the list and the removal
    out = io.StringIO()
    assert main(["image", "prune"], out=out, client=client) == 0
    assert out.getvalue().splitlines() == ["removed ddp-compose-user:aaa", "removed ddp-compose-user:ccc",
                                           "removed ddp-compose-user:ddd", "removed 3 derived image(s) no container uses"]
    assert "me/kept:1" in client.images.by_name and "ddp-compose-user:ddd" not in client.images.by_name
    assert ("api.images", json.dumps({"label": DERIVED_LABEL})) in client.calls
    assert set(client.images.by_name) == {DEFAULT_IMAGE, "ddp-compose-user:bbb", "ddp-compose-user:ccc",
                                          "someone/else:1", "me/kept:1"}  # (ccc: the fake's other client keeps it listed)
    again = io.StringIO()
    client.images.vanishing.clear()
    client.images.by_name.pop("ddp-compose-user:ccc")
    assert main(["image", "prune"], out=again, client=client) == 0
    assert again.getvalue() == "no derived image to remove: none exists, or a container uses each\n"


def test_the_default_build_is_the_default_tag_by_the_path_that_works_and_says_its_progress_at_once(builds):
    client, out = FakeDockerClient(), FlushedOutput()
    assert image_build(client=client, out=out) == 0
    assert builds == [(client, DEFAULT_IMAGE, {"torch_version": DEFAULT_TORCH, "base_image": DEFAULT_CPU_BASE,
                                                "offline": None})]
    assert out.getvalue() == "[image] base made\n" and out.flushed_at == ["[image] base made\n"]


@pytest.mark.parametrize("words, tag, hint", [
    (["--torch", "2.14.1"], "ddp-compose-node:torch-2.14.1", True),  # another torch: a tag of its own
    (["--torch", "2.14.1", "--image", "me/node:1"], "me/node:1", True),
    (["--image", DEFAULT_IMAGE], DEFAULT_IMAGE, False),  # the image runs use: nothing to add to them
])
def test_the_tag_follows_the_torch_release_unless_given_and_another_tag_says_how_to_run_on_it(builds, words, tag,
                                                                                              hint):
    out = io.StringIO()
    assert image_build(*words, client=FakeDockerClient(), out=out) == 0
    assert [b[1] for b in builds] == [tag]
    said = f"run jobs on it with: python -m orchestrate run --image {tag} ...\n"
    assert out.getvalue() == "[image] base made\n" + (said if hint else "")


@pytest.mark.parametrize("words, base, offline", [
    (["--offline"], DEFAULT_CPU_BASE, True),
    (["--online"], DEFAULT_CPU_BASE, False),
    (["--base-image", "python:3.12-slim"], "python:3.12-slim", None),
    (["--online", "--base-image", "python:3.12-slim"], "python:3.12-slim", False),
])
def test_the_path_and_base_are_as_asked(builds, words, base, offline):
    assert image_build(*words, client=FakeDockerClient()) == 0
    assert [(b[2]["base_image"], b[2]["offline"]) for b in builds] == [(base, offline)]


@pytest.mark.parametrize("words, said", [
    (["--torch", "3.1"], "--torch must be a torch release like 2.9.1"),
    (["--offline", "--base-image", "python:3.12-slim"], "--base-image python:3.12-slim is the official path's base:"
     " --offline builds on a base of its own, made from this machine's packages"),
])
def test_a_bad_build_is_refused_in_one_line_before_the_engine_is_asked(builds, capsys, words, said):
    # no client: the engine asked would be the unit tests' missing one, and its error said instead
    assert image_build(*words) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1, err
    assert builds == []


def test_if_missing_builds_only_an_image_absent_or_of_an_older_recipe(builds):
    client, out = FakeDockerClient(), io.StringIO()
    client.images.add("me/node:1")  # the user's own (no recipe label): current
    assert image_build("--image", "me/node:1", "--if-missing", client=client, out=out) == 0
    assert builds == [] and out.getvalue() == "node image me/node:1 already exists\n"
    client.images.add(DEFAULT_IMAGE, **{"io.ddp-compose.image": "node", RECIPE_LABEL: IMAGE_RECIPE + "-older"})
    assert image_build("--if-missing", client=client) == 0
    assert image_build("--image", "me/new:1", "--if-missing", client=client) == 0
    assert [b[1] for b in builds] == [DEFAULT_IMAGE, "me/new:1"]
    assert image_build("--image", "me/node:1", client=client) == 0  # without --if-missing: built again
    assert [b[1] for b in builds][-1] == "me/node:1"
