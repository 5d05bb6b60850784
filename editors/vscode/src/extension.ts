// Starts `memlint server` (from the `memlint.path` setting, or PATH) and connects it to the
// editor: diagnostics as you type, quick fixes, "Fix all", hover with the rule page, notebooks.
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
} from "vscode-languageclient/node";

let client: LanguageClient | undefined;

function serverOptions(): ServerOptions {
  const configured = vscode.workspace.getConfiguration("memlint").get<string>("path");
  const command = configured && configured.trim() !== "" ? configured.trim() : "memlint";
  return { command, args: ["server"], transport: TransportKind.stdio };
}

function initializationOptions(): Record<string, unknown> {
  const cfg = vscode.workspace.getConfiguration("memlint");
  const options: Record<string, unknown> = {
    ignore: cfg.get<string[]>("ignore") ?? [],
    "unsafe-fixes": cfg.get<boolean>("unsafeFixes") ?? false,
  };
  const select = cfg.get<string[] | null>("select");
  if (select) {
    options.select = select;
  }
  return options;
}

async function start(context: vscode.ExtensionContext): Promise<void> {
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "python" },
      { scheme: "untitled", language: "python" },
      { scheme: "file", language: "shellscript" },
      { scheme: "file", language: "yaml" },
      { scheme: "file", language: "json" },
      { scheme: "file", language: "toml" },
      { notebook: "jupyter-notebook", language: "python" },
    ],
    initializationOptions: initializationOptions(),
    synchronize: {
      fileEvents: vscode.workspace.createFileSystemWatcher(
        "**/{.memlint.toml,memlint.toml,pyproject.toml}"
      ),
    },
  };
  client = new LanguageClient("memlint", "memlint", serverOptions(), clientOptions);
  try {
    await client.start();
  } catch (err) {
    void vscode.window.showErrorMessage(
      `memlint: cannot start \`memlint server\` (${String(err)}). ` +
        "Install it with `pip install memlint-ml` or set `memlint.path`."
    );
  }
  context.subscriptions.push({ dispose: () => void client?.stop() });
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  context.subscriptions.push(
    vscode.commands.registerCommand("memlint.restart", async () => {
      await client?.stop();
      await start(context);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (e.affectsConfiguration("memlint")) {
        await client?.stop();
        await start(context);
      }
    })
  );
  await start(context);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
