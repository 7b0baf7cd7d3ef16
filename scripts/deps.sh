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
  # images for another architecture (make images ARCH=arm64 on x86-64):
  # mmdebstrap runs their programs through qemu-user, which the kernel
  # starts through binfmt_misc (registered below), and checks with
  # arch-test that it works
  qemu-user-static binfmt-support arch-test
  # the arm64 guest (make test-arm64)
  qemu-system-arm gcc-aarch64-linux-gnu
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
# qemu-user-static registers its interpreters with binfmt_misc when it is
# installed, and systemd mounts binfmt_misc at boot; a machine without
# systemd (a container) has neither done for it. Builds for this
# machine's own architecture need none of it, so this comes last, and a
# machine where it cannot be done is told so but not failed: only
# make test-arm64 and make bench need it.
if [ "$(uname -m)" = x86_64 ]; then
  binfmt=/proc/sys/fs/binfmt_misc
  if [ ! -e "$binfmt/status" ]; then
    echo "deps: mount -t binfmt_misc binfmt_misc $binfmt"
    if ! mount -t binfmt_misc binfmt_misc "$binfmt"; then
      echo "deps: cannot mount binfmt_misc on $binfmt, so arm64 images cannot be built on this machine (x86_64 ones can):" \
        "as root on a machine that allows it: mount -t binfmt_misc binfmt_misc $binfmt && update-binfmts --enable qemu-aarch64" \
        "(in a container: give it the privilege to, or register qemu-user-static's interpreters on its host)" >&2
    fi
  fi
  if [ -e "$binfmt/status" ] && [ "$(head -n 1 "$binfmt/qemu-aarch64" 2>/dev/null)" != enabled ]; then
    echo "deps: update-binfmts --enable qemu-aarch64"
    update-binfmts --enable qemu-aarch64 || true
  fi
  if [ -e "$binfmt/status" ] && [ "$(head -n 1 "$binfmt/qemu-aarch64" 2>/dev/null)" != enabled ]; then
    echo "deps: qemu-aarch64 is not registered with binfmt_misc, so arm64 images cannot be built on this machine (x86_64 ones can):" \
      "see \`update-binfmts --display qemu-aarch64\`; reinstalling qemu-user-static (apt-get install --reinstall qemu-user-static) registers it again" >&2
  fi
fi
echo "deps: done"
