#!/usr/bin/env bash
# Times memlint against ruff on a corpus of real ML training code, in one run, alternating the two
# so that both see the same machine load; then a pre-commit-sized run of 10 files.
#
#   usage: scripts/bench.sh [CORPUS]        (run from anywhere; paths are relative to the repo root)
#
# CORPUS is a folder made by scripts/fetch-corpus.sh (it holds src/); when it is missing or
# not given, the corpus is fetched into target/bench/corpus. ruff is installed into a virtualenv
# under target/bench. Environment: RUNS (default 7), SMALL_RUNS (default 30), RUFF_VERSION
# (default 0.17.6), PYTHON (default python3).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=target/bench
mkdir -p "$work"
runs=${RUNS:-7}
small_runs=${SMALL_RUNS:-30}
ruff_version=${RUFF_VERSION:-0.17.6}
python=${PYTHON:-python3}

corpus=${1:-$work/corpus}
if [ ! -d "$corpus/src" ]; then
  echo "fetching the corpus into $corpus" >&2
  bash scripts/fetch-corpus.sh "$corpus" >&2
fi
corpus=$(cd "$corpus" && pwd)
src=$corpus/src

venv=$work/ruff-$ruff_version
if [ ! -x "$venv/bin/ruff" ]; then
  echo "installing ruff $ruff_version into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "ruff==$ruff_version"
fi
ruff=$venv/bin/ruff

echo "building memlint (release)" >&2
cargo build --release --quiet
memlint=$root/target/release/memlint

if [ ! -x /usr/bin/time ]; then
  echo "error: /usr/bin/time is needed for the peak RSS (apt-get install time)" >&2
  exit 2
fi

# Wall time of one command in seconds (nanosecond clock); its peak RSS (KB) goes to $rss_file.
rss_file=$(mktemp)
trap 'rm -f "$rss_file"' EXIT
timed() {
  local start end status=0
  start=$(date +%s%N)
  /usr/bin/time -f '%M' -o "$rss_file" "$@" >/dev/null 2>&1 || status=$?
  end=$(date +%s%N)
  # memlint and ruff exit 1 when they report something; 2 or more is a failure.
  if [ "$status" -ge 2 ]; then
    echo "error: '$*' exited with $status" >&2
    exit 2
  fi
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
max() { sort -g | tail -n 1; }

files=$(find "$src" -name '*.py' | wc -l)
mem_cmd=("$memlint" check --isolated --output-format concise "$src")
ruff_cmd=("$ruff" check --no-cache --exit-zero --isolated "$src")

echo "corpus: $src ($files Python files, $(du -sh "$src" | cut -f1))"
echo "memlint: $("$memlint" --version), ruff: $("$ruff" --version), $(nproc) cores"
echo "commands:"
echo "  ${mem_cmd[*]}"
echo "  ${ruff_cmd[*]}"

# One untimed run of each fills the page cache.
timed "${mem_cmd[@]}" >/dev/null
timed "${ruff_cmd[@]}" >/dev/null

mem_times=() ruff_times=() mem_rss=() ruff_rss=()
for i in $(seq "$runs"); do
  mem_times+=("$(timed "${mem_cmd[@]}")")
  mem_rss+=("$(tail -n 1 "$rss_file")")
  ruff_times+=("$(timed "${ruff_cmd[@]}")")
  ruff_rss+=("$(tail -n 1 "$rss_file")")
  echo "  run $i: memlint ${mem_times[-1]} s, ruff ${ruff_times[-1]} s" >&2
done

mem_med=$(printf '%s\n' "${mem_times[@]}" | median)
ruff_med=$(printf '%s\n' "${ruff_times[@]}" | median)
mem_peak=$(printf '%s\n' "${mem_rss[@]}" | max)
ruff_peak=$(printf '%s\n' "${ruff_rss[@]}" | max)
ratio=$(awk -v a="$mem_med" -v b="$ruff_med" 'BEGIN { printf "%.3f", a / b }')
mem_mb=$(awk -v k="$mem_peak" 'BEGIN { printf "%.1f", k / 1024 }')
ruff_mb=$(awk -v k="$ruff_peak" 'BEGIN { printf "%.1f", k / 1024 }')

# A pre-commit-sized run: 10 files of ordinary size (4-40 KB; the corpus median is 7.5 KB), 3 of
# which hold memory arithmetic (names the memory rules read); then
# the largest such file alone, the worst case for one file since a file is parsed on one thread.
formulas='\b(num_params|total_params|model_size|n_params|param_count)\b|\.backward\('
sized() { while read -r f; do s=$(wc -c < "$f"); if [ "$s" -ge 4096 ] && [ "$s" -le 40960 ]; then echo "$f"; fi; done; }
mapfile -t parsed < <(grep -rlE --include='*.py' "$formulas" "$src" | sort | sized | head -n 3)
mapfile -t ordinary < <(find "$src" -name '*.py' | sort | sized)
mapfile -t plain < <(printf '%s\n' "${ordinary[@]}" | awk -v n="${#ordinary[@]}" 'NR % int(n / 7) == 1' | head -n 7)
largest=$(grep -rlE --include="*.py" "$formulas" "$src" | xargs -r ls -S 2>/dev/null | head -n 1 || true)
small=("${parsed[@]}" "${plain[@]}")
small_times=() small_ruff=() large_times=()
for i in $(seq "$small_runs"); do
  small_times+=("$(timed "$memlint" check --isolated --output-format concise "${small[@]}")")
  small_ruff+=("$(timed "$ruff" check --no-cache --exit-zero --isolated "${small[@]}")")
  large_times+=("$(timed "$memlint" check --isolated --output-format concise "$largest")")
done
ms() { awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }
small_ms=$(ms "$(printf '%s\n' "${small_times[@]}" | median)")
small_ruff_ms=$(ms "$(printf '%s\n' "${small_ruff[@]}" | median)")
large_ms=$(ms "$(printf '%s\n' "${large_times[@]}" | median)")
large_kb=$(( $(wc -c < "$largest") / 1024 ))

verdict() { if awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; then echo "met"; else echo "MISSED"; fi; }
echo
echo "corpus, median of $runs alternating runs:"
echo "  memlint        $mem_med s"
echo "  ruff           $ruff_med s"
echo "  memlint/ruff   $ratio            (target <= 0.25: $(verdict "$ratio" 0.25))"
echo "  memlint peak RSS  $mem_mb MB     (target <= 150 MB: $(verdict "$mem_mb" 150); ruff: $ruff_mb MB)"
echo "pre-commit run, ${#small[@]} files (${#parsed[@]} with memory arithmetic), median of $small_runs runs:"
echo "  memlint        $small_ms ms       (target < 30 ms: $(verdict "$small_ms" 29.999); ruff: $small_ruff_ms ms)"
echo "  one $large_kb KB file alone: $large_ms ms (${largest#"$src"/})"
echo "  the 10 files:"
printf '    %s\n' "${small[@]#"$src"/}"

# The prefilter must never change a result: every rule, with and without it, on the whole corpus.
with=$("$memlint" check --isolated --select ALL --output-format concise "$src" 2>&1 || true)
without=$("$memlint" check --isolated --select ALL --no-prefilter --output-format concise "$src" 2>&1 || true)
if [ "$with" == "$without" ]; then
  echo "prefilter: --select ALL gives the same $(printf '%s\n' "$with" | grep -c ': [A-Z]\+[0-9]\{3\} ' || true) diagnostics with and without it"
else
  echo "prefilter: CHANGED A RESULT" >&2
  diff <(printf '%s\n' "$with") <(printf '%s\n' "$without") >&2 || true
  exit 1
fi
