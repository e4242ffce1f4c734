// Starts `stratumc lsp` (stdio) for every *.stratum.yaml file.
const vscode = require('vscode');
const { LanguageClient } = require('vscode-languageclient/node');

let client;

exports.activate = function () {
  const command = vscode.workspace.getConfiguration('stratumc').get('path') || 'stratumc';
  client = new LanguageClient(
    'stratumc',
    'Stratum (stratumc lsp)',
    { command, args: ['lsp'] },
    { documentSelector: [{ scheme: 'file', pattern: '**/*.stratum.yaml' }] },
  );
  return client.start();
};

exports.deactivate = function () {
  return client ? client.stop() : undefined;
};
