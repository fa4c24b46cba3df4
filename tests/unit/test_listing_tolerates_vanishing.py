"""Other runs come and go on the same engine while ours lists containers and images: the docker
SDK's ``containers.list`` and ``images.list`` inspect each one they found, and one removed in
between raises NotFound. Every container listing, in the tool and in its tests, says
``ignore_removed=True`` (a CI run failed on one in a test that listed every container); images,
which have no such option, are listed with the engine's own ``api.images``, which inspects none."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("orchestrate", "tests/integration", "tests/workers", "benchmarks", "scripts")
EXEMPT = {"tests/unit/test_fakes.py"}  # tests the fake's own listing, with and without


def listings_that_break_on_a_vanished_one(path: Path) -> list[int]:
    """Lines of ``<anything>.containers.list(...)`` calls that do not pass ``ignore_removed=True``,
    and of any ``<anything>.images.list(...)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "list"
                and isinstance(node.func.value, ast.Attribute)):
            continue
        tolerant = any(k.arg == "ignore_removed" and isinstance(k.value, ast.Constant) and k.value.value is True
                       for k in node.keywords)
        if node.func.value.attr == "images" or (node.func.value.attr == "containers" and not tolerant):
            found.append(node.lineno)
    return found


def test_every_listing_outside_the_fakes_tolerates_a_container_or_image_that_vanished():
    offenders = [f"{path.relative_to(ROOT)}:{line}" for source in SOURCES for path in sorted((ROOT / source).rglob("*.py"))
                 if str(path.relative_to(ROOT)) not in EXEMPT for line in listings_that_break_on_a_vanished_one(path)]
    assert offenders == []


def test_the_check_finds_each_listing_that_would_fail_on_a_vanished_one(tmp_path):
    script = tmp_path / "lister.py"
    script.write_text("a = client.containers.list(all=True)\n"
                      "b = client.containers.list(all=True, ignore_removed=True)\n"
                      "c = docker_client.containers.list(ignore_removed=False, filters={})\n"
                      "d = client.networks.list()\n"
                      "e = client.images.list(filters={'dangling': True})\n"
                      "f = client.api.images(filters={'dangling': True}, quiet=True)\n")
    assert listings_that_break_on_a_vanished_one(script) == [1, 3, 5]
