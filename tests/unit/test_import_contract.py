"""The house's rules as code: each package's ``MAY_IMPORT`` (in its ``__init__``) names what it may
import of the others, and every module of it is held to that, imports inside functions
included. design.md's table of packages says the same, so the prose cannot drift either."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchestrate"
PACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
# The top-level modules every package but node may import: errors, printed tables, interrupts.
BASE = {"errors", "text", "interrupts"}


def imports_of(path: Path) -> set[str]:
    """What a module imports of ``orchestrate`` (``plan.layout``, ``errors``, ``node``...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n[len("orchestrate."):] for n in names if n.startswith("orchestrate.")}
    return found


def allowed(name: str, rules: tuple[str, ...], package: str) -> bool:
    """Whether ``name`` (``plan.layout.X``) is within the rules of ``package``."""
    top = name.split(".")[0]
    if top == package or "*" in rules:
        return True
    if package != "node" and top in BASE:
        return True
    if top not in PACKAGES and package != "node":  # a top-level module (progress.py) or a name in __init__
        return top in BASE or top == "progress"
    return any(name == rule or name.startswith(rule + ".") for rule in rules) or \
        (name in PACKAGES and any(rule.startswith(name + ".") for rule in rules))  # "from orchestrate.node import x"


def rules_of(package: str) -> tuple[str, ...]:
    return importlib.import_module(f"orchestrate.{package}").MAY_IMPORT


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_imports_only_what_its_package_may(package):
    rules = rules_of(package)
    broken = [f"{path.relative_to(ROOT)} imports orchestrate.{name}"
              for path in sorted((PACKAGE / package).rglob("*.py"))
              for name in sorted(imports_of(path)) if not allowed(name, rules, package)]
    assert broken == [], f"{package} may import {rules} (and {sorted(BASE)}): " + "; ".join(broken)


def test_every_rule_is_used_so_none_outlives_its_reason():
    unused = []
    for package in PACKAGES:
        used = {name for path in (PACKAGE / package).rglob("*.py") for name in imports_of(path)}
        unused += [f"{package}: {rule}" for rule in rules_of(package)
                   if rule != "*" and not any(n == rule or n.startswith(rule + ".") for n in used)]
    assert unused == []


def design_table() -> dict[str, str]:
    """design.md's table of packages: each package's 'imports' column."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    return {m[1]: m[2] for m in re.finditer(r"^\| `orchestrate/(\w+)/` \| .* \| ([^|]*) \|$", text, re.M)}


def test_design_md_names_each_packages_imports_as_its_rules_do():
    table = design_table()
    assert set(table) == set(PACKAGES)
    wrong = []
    for package in PACKAGES:
        rules = rules_of(package)
        if "*" in rules:
            assert "every package" in table[package]
            continue
        allowed_text = table[package].split("never")[0]  # "...; never `cli`" names what it may not
        named = set(re.findall(r"`([\w.]+)`", allowed_text)) - BASE - {"orchestrate"}
        ruled = set(rules)  # each rule as written: a package, or one module of it (node.shared_writes)
        if named != ruled:
            wrong.append(f"{package}: design.md names {sorted(named)}, MAY_IMPORT {sorted(ruled)}")
    assert wrong == []


def test_the_contract_catches_a_module_that_breaks_it(tmp_path):
    # the check itself can fail: report importing the engine is against its rules
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from orchestrate.engine.client import connect\n    return connect\n")
    names = imports_of(module)
    assert names == {"engine.client", "engine.client.connect"}
    assert not allowed("engine.client", rules_of("report"), "report")
    assert allowed("plan.layout", rules_of("report"), "report") and not allowed("plan.make", rules_of("report"), "report")


@pytest.mark.parametrize("backend", ["orchestrate.launch.compose_backend.ComposeBackend",
                                     "orchestrate.slurm.backend.SlurmBackend"])
def test_every_backend_has_the_interface_the_run_drives_with_its_signatures(backend):
    import inspect

    from orchestrate.launch.backend import Backend

    module, _, name = backend.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    declared = [m for m in vars(Backend) if not m.startswith("_") and callable(getattr(Backend, m))]
    assert set(declared) == {"bring_up_line", "render", "wait_ready", "ready_lines", "follow", "wind_down",
                             "partial_result"}
    for method in declared:
        assert hasattr(cls, method), f"{name} has no {method}"
        want = list(inspect.signature(getattr(Backend, method)).parameters)
        have = list(inspect.signature(getattr(cls, method)).parameters)
        assert have == want, f"{name}.{method}{have} is not the interface's {want}"
