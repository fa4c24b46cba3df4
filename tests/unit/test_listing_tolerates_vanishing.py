"""Other runs come and go on the same engine while ours lists containers: the docker SDK's
``containers.list`` inspects each container it found, and one removed in between raises NotFound
unless the call says ``ignore_removed=True``. Every such call, in the tool and in its tests, says
so (a CI run failed on one in a test that listed every container)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("orchestrate", "tests/integration", "tests/workers", "benchmarks", "scripts")
EXEMPT = {"tests/unit/test_fakes.py"}  # tests the fake's own listing, with and without


def listings_without_ignore_removed(path: Path) -> list[int]:
    """Lines of ``<anything>.containers.list(...)`` calls that do not pass ``ignore_removed=True``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "list"
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "containers"):
            if not any(k.arg == "ignore_removed" and isinstance(k.value, ast.Constant) and k.value.value is True
                       for k in node.keywords):
                found.append(node.lineno)
    return found


def test_every_container_listing_outside_the_fakes_tolerates_one_that_vanished():
    offenders = [f"{path.relative_to(ROOT)}:{line}" for source in SOURCES for path in sorted((ROOT / source).rglob("*.py"))
                 if str(path.relative_to(ROOT)) not in EXEMPT for line in listings_without_ignore_removed(path)]
    assert offenders == []


def test_the_check_finds_a_listing_that_would_fail_on_a_vanished_container(tmp_path):
    script = tmp_path / "lister.py"
    script.write_text("a = client.containers.list(all=True)\n"
                      "b = client.containers.list(all=True, ignore_removed=True)\n"
                      "c = docker_client.containers.list(ignore_removed=False, filters={})\n"
                      "d = client.networks.list()\n")
    assert listings_without_ignore_removed(script) == [1, 3]
