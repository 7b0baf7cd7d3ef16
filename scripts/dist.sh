#!/usr/bin/env bash
# Build the release bundle: scripts/dist.sh VERSION COMMIT ARCH (make dist).
#
#   dist/pybox-VERSION-linux-ARCH.tar.gz
#     pybox-VERSION-linux-ARCH/
#       bin/pybox                 static, -trimpath, no build id
#       lib/pybox/ARCH/           kernel, initramfs, manifest.json (as make install lays them out)
#       images/NAME.pybox-image   the built-in images, exported (pybox image import reads them)
#       SHA256SUMS                every other file's sha256 (sha256sum -c SHA256SUMS)
#       INSTALL                   what to do with it
#
# It reuses what `make` and `make images` built (cached), so it takes
# seconds plus the compression. The same commit gives the same bytes:
# entries sorted, owner 0, time 0, gzip without a name or time.
# Only Linux bundles for now; a macOS one (darwin-arm64) would hold the
# arm64 guest files and a signed pybox, once they have run on a Mac.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: dist.sh VERSION COMMIT ARCH}
commit=${2:?usage: dist.sh VERSION COMMIT ARCH}
arch=${3:?usage: dist.sh VERSION COMMIT ARCH}
case $arch in
  x86_64) goarch=amd64; kernel=bzImage ;;
  arm64) goarch=arm64; kernel=Image ;;
  *) echo "dist: unknown arch $arch" >&2; exit 1 ;;
esac
name=pybox-$version-linux-$arch
stage=dist/$name
rm -rf "$stage" "dist/$name.tar.gz"
mkdir -p "$stage/bin" "$stage/lib/pybox/$arch" "$stage/images"

# The bundle's pybox is static (CGO_ENABLED=0), so it runs on any Linux of
# its architecture, and carries no build id, so it is the same bytes from
# the same source and Go.
echo "dist: bin/pybox (linux/$goarch, static)"
CGO_ENABLED=0 GOOS=linux GOARCH=$goarch go build -trimpath \
  -ldflags "-buildid= -X pybox/host/version.Version=$version -X pybox/host/version.Commit=$commit" \
  -o "$stage/bin/pybox" ./cmd/pybox

for f in "$kernel" initramfs.cpio manifest.json; do
  install -m 0644 "build/$arch/$f" "$stage/lib/pybox/$arch/$f"
done
# The bundle's own pybox must find these guest files beside it, and they
# must match their manifest, whose agent is this version: a stale build
# directory is refused rather than shipped.
if [ "$(uname -m)" = "$arch" ]; then
  report=$(env -u PYBOX_KERNEL -u PYBOX_INITRAMFS "$stage/bin/pybox" version 2>&1) || {
    echo "dist: the bundle's pybox does not find its guest files:" >&2; echo "$report" >&2; exit 1; }
  if [ "$(grep -c ', matches$' <<<"$report")" != 2 ] || ! grep -q "^  agent  *$version (commit $commit)" <<<"$report"; then
    echo "dist: build/$arch/ is not what version $version builds (run make first):" >&2; echo "$report" >&2; exit 1
  fi
fi

for image in stdlib data; do
  echo "dist: images/$image.pybox-image"
  bin/pybox image export "$image" "$stage/images/$image.pybox-image" --arch "$arch" >/dev/null
done

sed -e "s/@VERSION@/$version/g" -e "s/@ARCH@/$arch/g" scripts/dist-INSTALL.txt > "$stage/INSTALL"
(cd "$stage" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
chmod -R u+rwX,go+rX,go-w "$stage"
chmod 0755 "$stage/bin/pybox"

echo "dist: dist/$name.tar.gz"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
  -C dist -cf - "$name" | gzip -n > "dist/$name.tar.gz"
(cd dist && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "dist: $(du -h "dist/$name.tar.gz" | cut -f1) $(cat "dist/$name.tar.gz.sha256")"
echo "dist: SHA256SUMS inside:"
sed 's/^/  /' "$stage/SHA256SUMS"
