#!/usr/bin/env bash
# scripts/fetch_deps.sh — download (not install) the Debian packages of sixfold's header-only
# and test dependencies into .deps/, for a machine that cannot install packages itself
# (scripts/gpu_check.sh unpacks them into a private prefix there).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9
