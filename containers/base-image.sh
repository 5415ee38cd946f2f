#!/usr/bin/env bash
# A Debian base image with python3 and venv, built with no container registry: debootstrap a minimal Debian into a
# folder, then `docker import` it. Our machines reach Debian's and PyPI's mirrors but not Docker Hub, so this is the
# BASE_IMAGE of the CPU worker image in CI (`make image-cpu CPU_BASE=kernelflow-base:bookworm`).
#
# usage: containers/base-image.sh [NAME]     (default kernelflow-base:bookworm; needs root, debootstrap, docker)
# env:   SUITE (bookworm), MIRROR (http://deb.debian.org/debian)
set -euo pipefail
name=${1:-kernelflow-base:bookworm}
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}

root=$(mktemp -d /tmp/kernelflow-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
started=$SECONDS
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$suite" "$root" "$mirror" \
  > "$root.log" 2>&1 || { tail -30 "$root.log"; echo "debootstrap failed (full log: $root.log)" >&2; exit 1; }
rm -f "$root.log"
# The package caches and lists only make the image bigger; an image that needs packages runs apt-get update first.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' - "$name" > /dev/null
echo "$name: Debian $suite minbase with $(docker run --rm --network none "$name" python3 --version)," \
  "built in $((SECONDS - started)) s"
