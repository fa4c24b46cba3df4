"""The CI recipe of examples/ci/: both files valid against their CI's own schema (the schemas
check-jsonschema ships, offline), and saying what the recipe promises: set-up with README's
command, the node image cached, the user's tests run with the plugin."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "ci"
RECIPES = [("github-actions.yml", "vendor.github-workflows"), ("gitlab-ci.yml", "vendor.gitlab-ci")]


def check_schema(path: Path, schema: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name, schema", RECIPES)
def test_the_recipe_is_valid_for_its_ci_and_a_broken_one_is_not(name, schema, tmp_path):
    checked = check_schema(EXAMPLES / name, schema)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    broken = yaml.safe_load((EXAMPLES / name).read_text())
    if "jobs" in broken:
        broken["jobs"]["multinode"]["steps"] = "not a list of steps"
    else:
        broken["multinode-ddp-tests"]["script"] = {"not": "a script"}
    (tmp_path / name).write_text(yaml.safe_dump(broken))
    assert check_schema(tmp_path / name, schema).returncode != 0


def commands(name: str) -> list[str]:
    """Every shell command the recipe runs, in order."""
    recipe = yaml.safe_load((EXAMPLES / name).read_text())
    if "jobs" in recipe:
        return [step["run"] for step in recipe["jobs"]["multinode"]["steps"] if "run" in step]
    job = recipe["multinode-ddp-tests"]
    return [*job["before_script"], *job["script"]]


@pytest.mark.parametrize("name", [n for n, _ in RECIPES])
def test_the_recipe_sets_up_with_the_readmes_command_caches_the_image_and_runs_the_users_tests(name):
    runs = "\n".join(commands(name))
    readme_first = re.search(r"^bash (scripts/\S+\.sh)\s+# set up everything, then train", (ROOT / "README.md").read_text(),
                             re.M)
    assert readme_first and f"bash .ddp-compose/{readme_first[1]}" in runs
    assert "docker load --input" in runs and "docker save --output" in runs and "ddp-compose-node:latest" in runs
    tests = re.search(r"\.ddp-compose/\.venv/bin/python -m pytest (\S+)", runs)
    assert tests and (EXAMPLES / tests[1]).is_dir()  # the user's tests, as examples/ci/ has them
    assert runs.index("run-demo.sh") < runs.index("-m pytest")
    text = (EXAMPLES / name).read_text()
    hashed = re.findall(r"\.ddp-compose/([\w/.]+?)(?:/\*\*)?'", text)  # what the image's cache key hashes
    assert all((ROOT / path).exists() for path in hashed), hashed
    assert hashed or "key: ddp-node-image-$DDP_COMPOSE_REF" in text
