#!/usr/bin/env bash
# Install what building and testing PyBox needs on a fresh Debian 12
# machine. Run as root (make deps). Safe to run again.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "$(id -u)" != 0 ]; then
  echo "deps: run as root (sudo make deps)" >&2
  exit 1
fi

packages=(
  # the VM
  qemu-system-x86
  # the guest kernel, from the distribution's source
  linux-source build-essential flex bison bc libelf-dev libssl-dev lz4 xz-utils cpio
  # images
  mmdebstrap erofs-utils squashfs-tools
  # the seccomp policy compiler (cgo, build time only)
  libseccomp-dev pkg-config
  # the end-to-end test of the user service runs a real systemd user
  # manager and checks the unit with systemd-analyze (util-linux brings
  # setpriv and unshare)
  systemd util-linux
  # make bench: the alternatives PyBox is measured against, and the host
  # floor's pandas
  bubblewrap runsc python3-pandas
  # the warm box launcher's own test compiles it against this machine's Python
  libpython3-dev
)
# The end-to-end tests' MCP clients from npm (the TypeScript SDK, and the
# agent CLIs with the Node.js 22 they run on) need npm and a Node.js to run
# it; a machine that already has them (from any source) keeps its own.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
echo "deps: apt-get install ${packages[*]}"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"

if ! command -v go >/dev/null; then
  echo "deps: Go 1.26 or newer is needed (https://go.dev/doc/install)" >&2
  exit 1
fi
echo "deps: go install staticcheck"
GOFLAGS= go install honnef.co/go/tools/cmd/staticcheck@v0.8.2

for dir in $(cd "$here" && git ls-files '*package.json' 2>/dev/null || true); do
  echo "deps: npm ci in $(dirname "$dir")"
  (cd "$here/$(dirname "$dir")" && npm ci --no-audit --no-fund --loglevel=error)
done
echo "deps: done"
