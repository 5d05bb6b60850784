#!/usr/bin/env bash
# Times memlint against ruff on whole training repositories, run from each repository's root the
# way users run them (`memlint .`, `ruff check --no-cache .`, each with the repository's own
# configuration), alternating the two so that both see the same machine load. Prints, per
# repository, the median wall times, their ratio and memlint's peak RSS; then checks that the
# prefilter changes no finding (`--no-prefilter` gives the same diagnostics).
#
#   usage: scripts/bench-repos.sh [NAME ...]      (default: every repository below)
#
# Repositories are checked out at the pinned commits under $REPOS (default target/bench/repos);
# a folder already there is used as it is. Environment: RUNS (default 5), RUFF_VERSION (default
# 0.17.6), PYTHON (default python3), MEMLINT (a memlint binary to time instead of this checkout's
# release build, to compare two versions).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=target/bench
runs=${RUNS:-5}
ruff_version=${RUFF_VERSION:-0.17.6}
python=${PYTHON:-python3}
repos=${REPOS:-$work/repos}
mkdir -p "$repos"
repos=$(cd "$repos" && pwd)

# name  repository  commit
pinned="
Megatron-LM         NVIDIA/Megatron-LM              d98e8a64ddf34856e74b24714e3bedb2f5a39553
Megatron-DeepSpeed  deepspeedai/Megatron-DeepSpeed  4efb479d5317ce9b86096b9d8e3e8030b0b5263b
torchtune           meta-pytorch/torchtune          bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1
gpt-neox            EleutherAI/gpt-neox             ea7aefd8f8e183256992d9fede4d7c71a46d67a5
LLaMA-Factory       hiyouga/LLaMA-Factory           ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30
diffusers           huggingface/diffusers           58eb52c0803ea9af3abec60841c2a093bdf1f951
accelerate          huggingface/accelerate          16cb6eb80dd9aa8b4df1a63ef57863e455d53b83
litgpt              Lightning-AI/litgpt             26857050fe3ff627cd714fe92f5838f51a3d5efa
nanoGPT             karpathy/nanoGPT                3adf61e154c3fe3fca428ad6bc3818b27a3b8291
"

selected=("$@")
wanted() {
  [ ${#selected[@]} -eq 0 ] && return 0
  local s
  for s in "${selected[@]}"; do [ "$s" == "$1" ] && return 0; done
  return 1
}

checkout() {
  local dir=$1 repo=$2 commit=$3
  [ -d "$dir" ] && return 0
  echo "fetching $repo at $commit into $dir" >&2
  git init -q "$dir.tmp"
  git -C "$dir.tmp" fetch -q --depth 1 "https://github.com/$repo" "$commit"
  git -C "$dir.tmp" checkout -q FETCH_HEAD
  mv "$dir.tmp" "$dir"
}

venv=$work/ruff-$ruff_version
if [ ! -x "$venv/bin/ruff" ]; then
  echo "installing ruff $ruff_version into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "ruff==$ruff_version"
fi
ruff=$root/$venv/bin/ruff

if [ -n "${MEMLINT:-}" ]; then
  memlint=$(cd "$(dirname "$MEMLINT")" && pwd)/$(basename "$MEMLINT")
else
  echo "building memlint (release)" >&2
  cargo build --release --quiet
  memlint=$root/target/release/memlint
fi

if [ ! -x /usr/bin/time ]; then
  echo "error: /usr/bin/time is needed for the peak RSS (apt-get install time)" >&2
  exit 2
fi

rss_file=$(mktemp)
trap 'rm -f "$rss_file"' EXIT
# Wall time of one command in seconds; its peak RSS (KB) goes to $rss_file.
timed() {
  local start end status=0
  start=$(date +%s%N)
  /usr/bin/time -f '%M' -o "$rss_file" "$@" >/dev/null 2>&1 || status=$?
  end=$(date +%s%N)
  if [ "$status" -ge 2 ]; then
    echo "error: '$*' exited with $status in $PWD" >&2
    exit 2
  fi
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
max() { sort -g | tail -n 1; }

echo "memlint: $("$memlint" --version), ruff: $("$ruff" --version), $(nproc) cores, median of $runs alternating runs"
echo "commands, from each repository's root: memlint .    ruff check --no-cache --exit-zero ."
echo
echo "| repository | .py | configs | memlint | ruff | ratio | memlint peak RSS |"
echo "|---|---|---|---|---|---|---|"
changed=()
while read -r name repo commit; do
  [ -z "$name" ] && continue
  wanted "$name" || continue
  dir=$repos/$name
  checkout "$dir" "$repo" "$commit"
  (
    cd "$dir"
    py=$(find . -name '*.py' -not -path './.git/*' | wc -l)
    configs=$(find . \( -name '*.json' -o -name '*.yaml' -o -name '*.yml' -o -name '*.toml' \) -not -path './.git/*' | wc -l)
    timed "$memlint" . >/dev/null
    timed "$ruff" check --no-cache --exit-zero . >/dev/null
    mem=() ruf=() rss=()
    for _ in $(seq "$runs"); do
      mem+=("$(timed "$memlint" .)")
      rss+=("$(cat "$rss_file")")
      ruf+=("$(timed "$ruff" check --no-cache --exit-zero .)")
    done
    m=$(printf '%s\n' "${mem[@]}" | median)
    r=$(printf '%s\n' "${ruf[@]}" | median)
    peak=$(printf '%s\n' "${rss[@]}" | max)
    printf '| %s | %s | %s | %.2f s | %.2f s | %.2f× | %.0f MB |\n' "$name" "$py" "$configs" "$m" "$r" \
      "$(awk -v a="$m" -v b="$r" 'BEGIN { print a / b }')" "$(awk -v k="$peak" 'BEGIN { print k / 1024 }')"
  )
  # The prefilter must not change a finding: the diagnostics, with and without it.
  with=$(cd "$dir" && "$memlint" --output-format concise . 2>/dev/null || true)
  without=$(cd "$dir" && "$memlint" --output-format concise --no-prefilter . 2>/dev/null || true)
  [ "$with" == "$without" ] || changed+=("$name")
done <<<"$pinned"
echo
if [ ${#changed[@]} -eq 0 ]; then
  echo "prefilter: every repository gives the same diagnostics with and without it"
else
  echo "prefilter: CHANGED A RESULT in ${changed[*]}" >&2
  exit 1
fi
