// Starts `stratumc lsp` (stdio) for every *.stratum.yaml file.
const vscode = require('vscode');
const { LanguageClient } = require('vscode-languageclient/node');

let client;

exports.activate = async function () {
  const command = vscode.workspace.getConfiguration('stratumc').get('path') || 'stratumc';
  client = new LanguageClient(
    'stratumc',
    'Stratum (stratumc lsp)',
    { command, args: ['lsp'] },
    { documentSelector: [{ scheme: 'file', pattern: '**/*.stratum.yaml' }] },
  );
  try {
    await client.start();
  } catch (err) {
    client = undefined;
    vscode.window.showErrorMessage(
      `Stratum: could not start \`${command} lsp\` (${err instanceof Error ? err.message : err}). ` +
        'Put stratumc on the PATH of your login shell (`cargo install --path cli`), ' +
        'or set "stratumc.path" to the binary, then reload the window.',
    );
  }
};

exports.deactivate = function () {
  return client ? client.stop() : undefined;
};
