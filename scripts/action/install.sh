#!/usr/bin/env bash
# Step 1 of the GitHub Action (action.yml): install memlint into a virtualenv under RUNNER_TEMP (the
# runner's own Python may be externally managed) and put its bin folder on GITHUB_PATH for the steps
# that follow.
#
# INPUT_VERSION: empty for the version of the action's own checkout, `latest`, a version (`0.1.0`),
#                or `source` to build the action's checkout with cargo (for unreleased refs).
# The wheel comes from PyPI as `memlint-ml` (`memlint` there is an unrelated project); pip's own
# settings apply (PIP_INDEX_URL, PIP_FIND_LINKS, ...).
set -euo pipefail

: "${RUNNER_TEMP:?RUNNER_TEMP is not set (this script runs inside a GitHub Actions job)}"
: "${GITHUB_PATH:?GITHUB_PATH is not set (this script runs inside a GitHub Actions job)}"
action_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dist=memlint-ml
version="${INPUT_VERSION:-}"

if [ "$version" = source ]; then
  root="$RUNNER_TEMP/memlint-source"
  cargo install --locked --quiet --root "$root" --path "$action_dir"
  echo "$root/bin" >>"$GITHUB_PATH"
  "$root/bin/memlint" --version
  exit 0
fi

case "$version" in
  "") version="$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$action_dir/Cargo.toml" | head -n 1)"
      spec="$dist==$version" ;;
  latest) spec="$dist" ;;
  *[!0-9A-Za-z.+-]*) echo "memlint action: invalid version input: '$version'" >&2; exit 2 ;;
  *) spec="$dist==${version#v}" ;;
esac

python=python3
command -v "$python" >/dev/null 2>&1 || python=python
venv="$RUNNER_TEMP/memlint-venv"
"$python" -m venv "$venv"
bin="$venv/bin"
[ -d "$bin" ] || bin="$venv/Scripts"   # Windows runners
"$bin/python" -m pip install --quiet --disable-pip-version-check "$spec"
echo "$bin" >>"$GITHUB_PATH"
"$bin/memlint" --version
