#!/usr/bin/env bash
# A Docker engine for the docker executor where none runs (CI, our CPU machines): Debian's docker.io (and
# debootstrap, for containers/base-image.sh) installed when missing, dockerd started in the background with settings
# that work in our sandbox: no iptables and no bridge (stage containers have no network anyway), cgroupfs. The storage
# driver is dockerd's own choice (overlay2 here; add --storage-driver=vfs to DOCKERD_FLAGS where overlay fails).
# Does nothing when an engine already answers. Needs root.
set -euo pipefail
if docker info > /dev/null 2>&1; then echo "docker engine: already running"; exit 0; fi
if ! command -v dockerd > /dev/null || ! command -v debootstrap > /dev/null; then
  apt-get update -q > /dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 docker.io debootstrap > /dev/null
fi
log=${DOCKERD_LOG:-/tmp/kernelflow-dockerd.log}
# shellcheck disable=SC2086
nohup dockerd --iptables=false --bridge=none --exec-opt native.cgroupdriver=cgroupfs ${DOCKERD_FLAGS:-} > "$log" 2>&1 &
for _ in $(seq 60); do
  if docker info > /dev/null 2>&1; then echo "docker engine: started, pid $!, log $log"; exit 0; fi
  sleep 1
done
tail -20 "$log" >&2
echo "docker engine: dockerd did not answer within 60 s; its log: $log" >&2
exit 1
