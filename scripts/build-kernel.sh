#!/usr/bin/env bash
# Build the PyBox guest kernel from the distribution's linux-source package.
#
#   scripts/build-kernel.sh [x86_64|arm64] OUT
#
# tinyconfig + kernelconfig/ARCH.config, then bzImage (x86_64) or Image
# (arm64). The result is cached under $PYBOX_CACHE/kernel/ keyed by the
# source package's version, the fragment and this script, so a second build
# with the same inputs only copies the cached file; a fresh machine builds
# it from scratch with the same command (about 9 minutes on 2 cores).
set -euo pipefail

arch=${1:?usage: build-kernel.sh x86_64|arm64 OUT}
out=${2:?usage: build-kernel.sh x86_64|arm64 OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
fragment=$here/kernelconfig/$arch.config
cache=${PYBOX_CACHE:-$HOME/.cache/pybox}
tarball=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -n 1 || true)

if [ -z "$tarball" ]; then
  echo "build-kernel: no /usr/src/linux-source-*.tar.xz (try: make deps, or apt-get install linux-source)" >&2
  exit 1
fi
[ -f "$fragment" ] || { echo "build-kernel: no fragment $fragment" >&2; exit 1; }

case $arch in
  x86_64) karch=x86_64; target=bzImage; image=arch/x86/boot/bzImage; cross= ;;
  arm64)  karch=arm64; target=Image; image=arch/arm64/boot/Image; cross=aarch64-linux-gnu-
          if ! command -v ${cross}gcc >/dev/null; then
            echo "build-kernel: no arm64 cross compiler (try: apt-get install gcc-aarch64-linux-gnu)" >&2
            exit 1
          fi ;;
  *) echo "build-kernel: unknown arch $arch (x86_64 or arm64)" >&2; exit 1 ;;
esac

pkgversion=$(dpkg-query -W -f '${Version}' "$(basename "$tarball" .tar.xz)" 2>/dev/null || stat -c %s-%Y "$tarball")
key=$( { echo "$arch $pkgversion"; cat "$fragment" "$0"; } | sha256sum | cut -c1-16)
cached=$cache/kernel/$arch-$key/$target

if [ -f "$cached" ]; then
  echo "build-kernel: cache hit $cached"
else
  echo "build-kernel: building $target for $arch from $(basename "$tarball") ($pkgversion), key $key"
  mkdir -p "$cache/kernel"
  work=$(mktemp -d "$cache/kernel/build-$arch-XXXXXX")
  trap 'rm -rf "$work"' EXIT
  tar -C "$work" -xf "$tarball"
  src=$(echo "$work"/linux-source-*)
  mk() { make -C "$src" -s ARCH=$karch CROSS_COMPILE=$cross "$@"; }
  mk tinyconfig >/dev/null 2>&1
  (cd "$src" && KCONFIG_CONFIG=.config scripts/kconfig/merge_config.sh -m -O . .config "$fragment" >/dev/null)
  mk olddefconfig
  # Every option the fragment asks for must have survived olddefconfig:
  # a dependency that was not met silently drops it otherwise.
  missing=0
  while IFS= read -r line; do
    case $line in
      CONFIG_*=*) grep -qx "$line" "$src/.config" || { echo "build-kernel: $line did not take" >&2; missing=1; } ;;
      "# CONFIG_"*" is not set") opt=${line#\# }; opt=${opt%% *}; ! grep -q "^$opt=" "$src/.config" || { echo "build-kernel: $opt is still set" >&2; missing=1; } ;;
    esac
  done < "$fragment"
  [ $missing = 0 ] || exit 1
  start=$(date +%s)
  mk -j"$(nproc)" KBUILD_BUILD_TIMESTAMP="2026-01-01 00:00:00 UTC" KBUILD_BUILD_USER=pybox KBUILD_BUILD_HOST=pybox $target
  echo "build-kernel: built in $(( $(date +%s) - start )) s"
  mkdir -p "$(dirname "$cached")"
  cp "$src/$image" "$cached.tmp"
  cp "$src/.config" "$(dirname "$cached")/config"
  mv "$cached.tmp" "$cached"
fi
mkdir -p "$(dirname "$out")"
cp "$cached" "$out.tmp" && mv "$out.tmp" "$out"
echo "build-kernel: $out ($(stat -c %s "$out") bytes)"
