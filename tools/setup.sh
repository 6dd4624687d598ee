#!/usr/bin/env bash
# Installs every Debian package that kvtier's build, tests and benchmarks need.
# Idempotent; safe to run on a fresh Debian 12 machine (as root, or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential g++ clang-14 libclang-rt-14-dev lld cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwy-dev libcli11-dev nlohmann-json3-dev libxxhash-dev libpcre2-dev libisal-dev
  libcpp-httplib-dev
  libhiredis-dev redis-server redis-tools haproxy
  python3 python3-jinja2 gnuplot-nox
  chromium fonts-dejavu-core  # the status page e2e test (src/server/e2e/*.browser.mjs)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# apt_install PACKAGE...: Debian's packages, as root or through sudo.
apt_install() {
  local SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if [ ${#missing[@]} -ne 0 ]; then apt_install "${missing[@]}"; fi

# The server's end-to-end tests (src/server/e2e) run the official openai npm client: Node.js
# >= 18 and npm. A node already on PATH (e.g. a CI image's Node 20) is kept; otherwise Debian's.
node_missing=()
if ! command -v node >/dev/null 2>&1; then
  node_missing=(nodejs npm)
elif ! command -v npm >/dev/null 2>&1; then
  node_missing=(npm)
fi
if [ ${#node_missing[@]} -ne 0 ]; then apt_install "${node_missing[@]}"; fi

# The bundled model's held-out evaluation text (Persuasion, data/corpus/eval.txt), read from
# Debian's r-cran-janeaustenr; git-ignored, fetched once.
# Tests do not need it: a failed fetch (no registry) is a warning, not a failed setup.
"$(dirname "${BASH_SOURCE[0]}")/corpus/fetch.sh" --austen-only ||
  echo "setup: warning: could not fetch the evaluation text (data/corpus/eval.txt)" >&2
