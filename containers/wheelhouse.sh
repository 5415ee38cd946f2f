#!/usr/bin/env bash
# Fill the wheelhouse that containers/Dockerfile installs from (containers/wheels/), with this machine's pip (its
# settings, our CPU torch from local disk), so that the image build itself needs no index.
#
# usage: containers/wheelhouse.sh PIP BASE_IMAGE TORCH TRITON     (run from the repository root)
#   deps/  TORCH, TRITON and pyproject.toml's dependencies (requirements.txt), resolved by the host's pip; then the
#          base image's own Python resolves them offline and names what it still misses (a dependency behind a
#          marker such as python_full_version < "3.11.3" that the host's Python did not need), which the host
#          fetches in turn, until nothing is missing
#   app/   kernelflow's own wheel
# A base whose Python differs from the host's in more than the micro version (a CUDA image's 3.12) gets the wheels
# that fit and a note: its build then takes the rest from the index (no OFFLINE=1).
# A complete deps/ is also kept in $KERNELFLOW_WHEELHOUSE_CACHE (default $KERNELFLOW_CACHE/wheelhouse, that is
# ~/.cache/kernelflow/wheelhouse), keyed by the base image's id, TORCH, TRITON, the requirements and the host's
# installed versions (pip freeze): a fresh clone on the same machine copies it from there (~5 s) instead of resolving
# and checking it again (~45 s). One key is kept, the latest (only key folders are removed from the cache folder,
# nothing else a user keeps there); KERNELFLOW_WHEELHOUSE_CACHE=off keeps none.
set -euo pipefail
pip=$1 base=$2 torch=$3 triton=$4
deps=containers/wheels/deps app=containers/wheels/app log=containers/wheels/pip.log
rm -rf "$app" && mkdir -p "$deps" "$app" && : > "$log"
wheel() { "$pip" wheel -q "$@" >> "$log" 2>&1 || { tail -20 "$log" >&2; echo "wheelhouse: pip wheel $* failed" >&2; exit 1; }; }
wheel --no-deps -w "$app" .
"$(dirname "$pip")/python" -c "import tomllib
print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > "$deps/requirements.txt"
cache=${KERNELFLOW_WHEELHOUSE_CACHE:-${KERNELFLOW_CACHE:-${HOME:-/tmp}/.cache/kernelflow}/wheelhouse}
key=$({ docker image inspect --format '{{.Id}}' "$base" 2>/dev/null || echo "$base"; echo "$torch $triton"
        cat "$deps/requirements.txt"; "$pip" freeze --exclude-editable 2>/dev/null; } | sha256sum | cut -c1-16)
if [ "$cache" != off ] && [ -f "$cache/$key/complete" ]; then
  cp -l "$cache/$key"/*.whl "$deps"/ 2>/dev/null || cp "$cache/$key"/*.whl "$deps"/
  echo "wheelhouse: complete for $base ($(ls "$cache/$key" | grep -c '\.whl$') wheels from $cache/$key)"
  exit 0
fi
keep() {  # deps/ is complete for this key: the cache keeps it, in place of any other key's
  [ "$cache" = off ] && return 0
  { mkdir -p "$cache" && rm -rf "$cache/$key.tmp" && mkdir "$cache/$key.tmp" \
    && cp "$deps"/*.whl "$cache/$key.tmp"/ && touch "$cache/$key.tmp/complete" \
    && find "$cache" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '.*/[0-9a-f]{16}(\.tmp)?' \
         ! -name "$key.tmp" -exec rm -rf {} + \
    && mv "$cache/$key.tmp" "$cache/$key"; } || echo "wheelhouse: not kept in $cache (the next clone resolves it again)"
}
wheel -w "$deps" "$torch" "$triton" -r "$deps/requirements.txt"

host=$("$(dirname "$pip")/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
target=$(docker run --rm --network none "$base" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$host" != "$target" ]; then
  echo "wheelhouse: $base has Python $target, this pip runs $host: its build takes what does not fit from the index"
  exit 0
fi
for _ in $(seq 10); do
  missing=$(docker run --rm --network none -v "$PWD/$deps:/wheels:ro" "$base" sh -c \
    "python3 -m venv /tmp/v && /tmp/v/bin/pip install -q --dry-run --no-index --find-links /wheels \
     '$torch' '$triton' -r /wheels/requirements.txt 2>&1" |
    sed -n 's/^ERROR: No matching distribution found for \([^;]*\).*/\1/p' || true)
  if [ -z "$missing" ]; then echo "wheelhouse: complete for $base ($(ls "$deps" | wc -l) files)"; keep; exit 0; fi
  echo "wheelhouse: $base's Python also needs $missing"
  wheel -w "$deps" "$missing"
done
echo "wheelhouse: still incomplete for $base after 10 rounds" >&2
exit 1
