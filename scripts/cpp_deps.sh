#!/usr/bin/env bash
# The C++ client's build dependencies (clients/cpp): Debian packages, installed only when
# missing. Idempotent; runs as root on a fresh Debian machine (no sudo there) or with sudo.
#   bash scripts/cpp_deps.sh          # install what is missing
#   bash scripts/cpp_deps.sh --check  # exit 1 (listing them) if any is missing
set -euo pipefail
PKGS=(g++ cmake make pkg-config libzmq3-dev cppzmq-dev libmsgpack-cxx-dev)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "${1:-}" = "--check" ]; then
    echo "missing Debian packages: ${missing[*]}; run: bash scripts/cpp_deps.sh" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null; then
    SUDO=(sudo)
else
    echo "cpp_deps: need root (or sudo) to install ${missing[*]}" >&2
    exit 1
fi
echo "cpp_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
