-- A headless Neovim session against memlint server (run by .ci/editors): attach the server to
-- the buffer, wait for its diagnostics, apply the GA001 quick fix, write the file, and wait for
-- GA001 to clear. Uses the client API of Neovim 0.7 and newer.
local function fail(msg)
  io.stderr:write("nvim: " .. msg .. "\n")
  vim.cmd("cquit 1")
end

local function code(d)
  return d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code)
end

local function find(buf, wanted)
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    if code(d) == wanted then
      return d
    end
  end
end

local buf = vim.api.nvim_get_current_buf()
local client_id = vim.lsp.start_client({
  name = "memlint",
  cmd = { os.getenv("MEMLINT") or "memlint", "server" },
  root_dir = vim.fn.expand("%:p:h"),
})
if not client_id then
  fail("memlint server did not start")
end
vim.lsp.buf_attach_client(buf, client_id)

if not vim.wait(60000, function() return find(buf, "GA001") ~= nil and find(buf, "MEM001") ~= nil end, 50) then
  fail("no GA001 and MEM001 diagnostics")
end
local ga = find(buf, "GA001")
local params = {
  textDocument = { uri = vim.uri_from_bufnr(buf) },
  range = {
    start = { line = ga.lnum, character = ga.col },
    ["end"] = { line = ga.end_lnum, character = ga.end_col },
  },
  context = { diagnostics = {}, only = { "quickfix" } },
}
local responses = vim.lsp.buf_request_sync(buf, "textDocument/codeAction", params, 30000) or {}
local applied = false
for _, response in pairs(responses) do
  if response.err or response.error then
    fail("codeAction: " .. vim.inspect(response.err or response.error))
  end
  for _, action in ipairs(response.result or {}) do
    if not applied and action.title:find("^Fix GA001") and action.edit then
      vim.lsp.util.apply_workspace_edit(action.edit, "utf-16")
      applied = true
    end
  end
end
if not applied then
  fail("no GA001 quick fix among the code actions")
end
vim.cmd("silent write")
if not vim.wait(60000, function() return find(buf, "GA001") == nil end, 50) then
  fail("GA001 did not clear after the fix")
end
print("memlint: GA001 fixed in Neovim")
vim.lsp.stop_client(client_id)
vim.cmd("qall!")
