#!/usr/bin/env bash
# Recall and false alarms on real code: bench/realbugs.tsv pins public files at commits (the version
# before a bug fix, the fix itself, and clean files); their text is never stored in this repository.
#
#   usage: scripts/realbugs.sh MIRRORS_DIR
#
# MIRRORS_DIR/OWNER+NAME/repo must be a git directory of github.com/OWNER/NAME holding the pinned
# commits (a bare mirror or a clone). Each row is linted with default rules and --isolated: `file`
# rows as the file alone, `repo` rows inside a checkout of the whole repository at that commit
# (only findings in the row's file count). A buggy row is caught when its rule is reported on its
# line; a fixed or clean row is a false alarm when anything is reported in its file. A fixed row
# may name a finding that must remain: a second, real bug the fix left in place (never fixed
# upstream); that finding is expected and anything else is a false alarm.
#
#   MEMLINT=path        the binary (default: target/release/memlint, built if missing)
#   MANIFEST=path       the manifest (default: bench/realbugs.tsv)
#   VERBOSE=1           print what memlint said on every row
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mirrors=${1:?usage: scripts/realbugs.sh MIRRORS_DIR}
manifest=${MANIFEST:-$root/bench/realbugs.tsv}
memlint=${MEMLINT:-$root/target/release/memlint}
if [ ! -x "$memlint" ]; then
  (cd "$root" && cargo build --release --quiet)
fi
memlint=$(cd "$(dirname "$memlint")" && pwd)/$(basename "$memlint")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

buggy=0 caught=0 clean=0 alarms=0 missing=0 remaining=0 remained=0
missed_rows=() alarm_rows=()
# A rule that is off by default is selected for its pair's rows (a fixed row follows its buggy one).
declare -A rule_of
while IFS=$'\t' read -r id repo commit path kind expect line scope _note; do
  case "$id" in ''|'#'*) continue ;; esac
  git_dir="$mirrors/${repo/\//+}/repo"
  [ -d "$git_dir" ] || git_dir="$mirrors/${repo/\//+}"
  dir="$work/$id-$kind"
  mkdir -p "$dir"
  if [ "$scope" = repo ]; then
    ok=$(git --git-dir="$git_dir" archive "$commit" 2>/dev/null | tar -x -C "$dir" 2>/dev/null && echo y || echo n)
    # A snapshot may lack large data files (media, datasets): take the files memlint reads.
    if [ "$ok" != y ] && git --git-dir="$git_dir" cat-file -e "$commit:$path" 2>/dev/null; then
      git --git-dir="$git_dir" ls-tree -r --name-only "$commit" |
        grep -E '\.(py|ipynb|sh|bash|json|ya?ml|toml|txt|cfg)$' |
        while IFS= read -r f; do
          mkdir -p "$dir/$(dirname "$f")"
          git --git-dir="$git_dir" show "$commit:$f" >"$dir/$f" 2>/dev/null || rm -f "$dir/$f"
        done
      ok=y
    fi
    target=.
  else
    mkdir -p "$dir/$(dirname "$path")"
    ok=$(git --git-dir="$git_dir" show "$commit:$path" >"$dir/$path" 2>/dev/null && echo y || echo n)
    target=$path
  fi
  if [ "$ok" != y ]; then
    echo "unavailable: $id $kind ($repo@${commit:0:10}:$path)"
    missing=$((missing + 1))
    continue
  fi
  [ "$kind" = buggy ] && rule_of[$id]=$expect
  select=()
  [ -n "${rule_of[$id]:-}" ] && select=(--extend-select "${rule_of[$id]}")
  out=$(cd "$dir" && "$memlint" check --isolated "${select[@]}" --output-format concise "$target" 2>/dev/null | grep -F "$path:" || true)
  [ -n "${VERBOSE:-}" ] && printf '%s %s:\n%s\n' "$id" "$kind" "$out"
  # What memlint reports on the expected line with the expected rule.
  # A fixed or clean row may name several findings that remain: `GA008,GA005` at `164,165`.
  quoted=$(printf '%s' "$path" | sed 's/[.[\*^$]/\\&/g')
  expected_line=""
  IFS=, read -ra codes <<<"$expect"
  IFS=, read -ra lines <<<"$line"
  for k in "${!codes[@]}"; do
    expected_line+="${expected_line:+|}^$quoted:${lines[$k]:-}:[0-9]+: ${codes[$k]} "
  done
  if [ "$kind" = buggy ]; then
    buggy=$((buggy + 1))
    if grep -qE "$expected_line" <<<"$out"; then
      caught=$((caught + 1))
    else
      missed_rows+=("$id ($expect at $path:$line)")
    fi
  else
    clean=$((clean + 1))
    if [ "$expect" != - ]; then
      for k in "${!codes[@]}"; do
        remaining=$((remaining + 1))
        grep -qE "^$quoted:${lines[$k]:-}:[0-9]+: ${codes[$k]} " <<<"$out" && remained=$((remained + 1))
      done
      out=$(grep -vE "$expected_line" <<<"$out" || true)
    fi
    if [ -n "$out" ]; then
      alarms=$((alarms + 1))
      alarm_rows+=("$id $kind: $(head -n 1 <<<"$out")")
    fi
  fi
  rm -rf "$dir"
done <"$manifest"

for r in "${missed_rows[@]}"; do echo "missed: $r"; done
for r in "${alarm_rows[@]}"; do echo "false alarm: $r"; done
recall=$(awk -v c="$caught" -v b="$buggy" 'BEGIN { printf "%.3f", b ? c / b : 0 }')
echo "buggy versions caught: $caught of $buggy (recall $recall)"
echo "fixed and clean versions with a finding: $alarms of $clean"
[ "$remaining" -eq 0 ] || echo "bugs a fix left in place, still reported: $remained of $remaining"
[ "$missing" -eq 0 ] || echo "rows whose commit was not in MIRRORS_DIR: $missing"
