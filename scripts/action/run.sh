#!/usr/bin/env bash
# Step 2 of the GitHub Action (action.yml): lint with annotations (`--output-format github`) and, when
# INPUT_SARIF_FILE is set, also write SARIF there for github/codeql-action/upload-sarif.
#
# INPUT_PATHS: files or folders separated by whitespace (default `.`); INPUT_ARGS: extra arguments
# for `memlint check` (split on whitespace, no globbing). The step fails as memlint does: 1 with
# diagnostics, 2 on a usage, configuration or I/O error. In the SARIF run, diagnostics (exit 1) go to
# code scanning and only an error (exit 2) fails the step.
set -uo pipefail

set -f
# shellcheck disable=SC2206  # split on whitespace on purpose
paths=(${INPUT_PATHS:-.})
# shellcheck disable=SC2206
args=(${INPUT_ARGS:-})
set +f
[ "${#paths[@]}" -gt 0 ] || paths=(.)
memlint="${MEMLINT:-memlint}"

"$memlint" check --output-format github ${args[@]+"${args[@]}"} "${paths[@]}"
status=$?

if [ -n "${INPUT_SARIF_FILE:-}" ]; then
  "$memlint" check --output-format sarif ${args[@]+"${args[@]}"} "${paths[@]}" >"$INPUT_SARIF_FILE"
  sarif_status=$?
  if [ "$sarif_status" -ge 2 ]; then
    echo "memlint action: writing SARIF failed (exit $sarif_status)" >&2
    [ "$status" -ge "$sarif_status" ] || status=$sarif_status
  fi
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    echo "sarif-file=$INPUT_SARIF_FILE" >>"$GITHUB_OUTPUT"
  fi
fi
exit "$status"
