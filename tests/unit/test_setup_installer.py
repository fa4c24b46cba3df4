"""scripts/setup.sh's installer: uv at the project's pin does the installs, pip takes over (and
says so) where uv cannot be had or cannot install, and pip's index, where one is set, is uv's.
The real functions of setup.sh run under bash, against a stand-in venv: its ``python`` and ``uv``
are scripts that log what they were asked."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrate.config.torch_versions import UV_VERSION

ROOT = Path(__file__).resolve().parents[2]

# The stand-in interpreter: answers the pin question with the real module, logs every pip call,
# and shows pip settings from PIP_CONFIG; `pip install uv==...` puts the stand-in uv in the venv
# (and fails where NO_UV is set).
PYTHON = f"""#!/bin/bash
case "$*" in
  *"import UV_VERSION"*) exec {shutil.which("python3")} "$@" ;;
  "-m pip config list")  # a long listing, as pip's can be: it fails if its reader stops early
    printf '%s\\n' "${{PIP_CONFIG:-}}"; for i in $(seq 20000); do echo "global.x$i=1" || exit 1; done ;;
  "-m pip config get global.index-url") [ -n "${{PIP_CONFIG_INDEX:-}}" ] && echo "$PIP_CONFIG_INDEX" || exit 1 ;;
  *"pip install"*"uv=="*)
    echo "pip $*" >> "$LOG"
    [ -z "${{NO_UV:-}}" ] || exit 1
    cp "$VENV/uv-stand-in" "$VENV/bin/uv" ;;
  *"pip install"*) echo "pip $*" >> "$LOG" ;;
  *"import orchestrate"*) exit 0 ;;  # a venv with everything imported
  *) echo "unexpected: $*" >> "$LOG"; exit 3 ;;
esac
"""
# The stand-in uv: says its version as uv does, and logs each install with the index it was given.
UV = f"""#!/bin/bash
if [ "$1" = --version ]; then echo "uv {UV_VERSION} (x86_64-unknown-linux-gnu)"; exit 0; fi
echo "uv $* index=${{UV_DEFAULT_INDEX:-}}" >> "$LOG"
exit "${{UV_FAILS:-0}}"
"""


@pytest.fixture
def checkout(tmp_path):
    """A copy of setup.sh and the pin's module beside a stand-in .venv."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copytree(ROOT / "orchestrate", tmp_path / "orchestrate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(PYTHON)
    (bin_dir / "python").chmod(0o755)
    (tmp_path / ".venv" / "uv-stand-in").write_text(UV)
    (tmp_path / ".venv" / "uv-stand-in").chmod(0o755)
    return tmp_path


def install(checkout: Path, *args: str, **env: str) -> tuple[str, list[str]]:
    """Run ensure_uv then venv_install ARGS; return set-up's output and the logged calls."""
    return set_up(checkout, f'ensure_uv; venv_install {" ".join(args)}', **env)


def set_up(checkout: Path, commands: str, **env: str) -> tuple[str, list[str]]:
    """Run COMMANDS after sourcing setup.sh; return set-up's output and the logged calls."""
    log = checkout / "calls.log"
    log.touch()
    script = f"source scripts/setup.sh; {commands}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    proc = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True, timeout=60,
                          env={**clean, "DDP_SKIP_SETUP": "1", "LOG": str(log),
                               "VENV": str(checkout / ".venv"), **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, log.read_text().splitlines()


def test_uv_at_the_pin_installs_with_compiled_bytecode_and_pip_installs_only_uv(checkout):
    output, calls = install(checkout, "-e", "X[dev]")
    assert calls[0].startswith("pip -m pip install") and calls[0].endswith(f"uv=={UV_VERSION}")
    assert calls[1:] == [f"uv pip install --quiet --compile-bytecode --python {checkout}/.venv/bin/python"
                         " -e X[dev] index="]
    assert "pip installs instead" not in output and "trying pip" not in output


def test_a_uv_already_at_the_pin_is_used_as_it_is(checkout):
    install(checkout, "a")
    _, calls = install(checkout, "b")  # the second set-up finds uv in the venv
    assert [c for c in calls if "uv==" in c] == [f"pip -m pip install --quiet --disable-pip-version-check"
                                                  f" uv=={UV_VERSION}"]  # the first one's only
    assert calls[-1].startswith("uv pip install") and calls[-1].endswith(" b index=")


def test_pip_installs_and_says_so_where_uv_cannot_be_had_or_cannot_install(checkout):
    output, calls = install(checkout, "-e", "X[dev]", NO_UV="1")
    assert f"uv {UV_VERSION} could not be installed; pip installs instead" in output
    assert calls[-1] == "pip -m pip install --quiet --disable-pip-version-check -e X[dev]"

    output, calls = install(checkout, "torch", UV_FAILS="2")  # uv is there now, and fails
    assert "uv could not install (torch); trying pip" in output
    assert calls[-2].startswith("uv pip install") and calls[-1].endswith("--disable-pip-version-check torch")


def test_pips_index_is_uvs_and_a_users_own_uv_index_wins(checkout):
    _, calls = install(checkout, "a", PIP_INDEX_URL="http://mirror.example/simple")
    assert calls[-1].endswith("a index=http://mirror.example/simple")
    _, calls = install(checkout, "b", PIP_CONFIG_INDEX="http://config.example/simple")
    assert calls[-1].endswith("b index=http://config.example/simple")
    _, calls = install(checkout, "c", PIP_INDEX_URL="http://mirror.example/simple",
                       UV_DEFAULT_INDEX="http://mine.example/simple")
    assert calls[-1].endswith("c index=http://mine.example/simple")


def test_pips_extra_indexes_are_said_to_be_unused(checkout):
    output, _ = install(checkout, "a", PIP_CONFIG=":env:.find-links='/opt/wheels'")
    assert "pip's extra indexes and find-links are not used" in output
    output, _ = install(checkout, "a", PIP_CONFIG="global.cert='/etc/ssl/certs/ca.crt'")
    assert "not used" not in output


def test_a_venv_is_installed_again_when_pyproject_changed_since_and_left_alone_when_not(checkout):
    (checkout / "pyproject.toml").write_text('dev = ["pytest>=8"]\n')
    output, calls = set_up(checkout, "ensure_venv")  # a .venv from before set-up kept pyproject.toml
    assert "bringing" in output and "up to date with pyproject.toml" in output
    assert calls[-1].startswith("uv pip install") and f"-e {checkout}[dev]" in calls[-1]
    before = len(calls)

    output, calls = set_up(checkout, "ensure_venv")
    assert len(calls) == before and "up to date" not in output  # nothing changed: nothing installed

    (checkout / "pyproject.toml").write_text('dev = ["pytest>=8,<9.2"]\n')  # a pin, pulled
    output, calls = set_up(checkout, "ensure_venv")
    assert len(calls) > before and f"-e {checkout}[dev]" in calls[-1]
    assert (checkout / ".venv" / "installed-pyproject.toml").read_text() == 'dev = ["pytest>=8,<9.2"]\n'
