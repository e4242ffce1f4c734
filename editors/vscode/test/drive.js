// Drives code-server (VS Code in a browser) through headless Chromium with
// playwright-core and checks the extension in this folder end to end: it
// activates, `stratumc lsp` publishes diagnostics for a broken spec (Problems
// panel and squiggles), hover and go to definition answer on a step
// reference, and fixing the error clears the diagnostics. Exits 1 on the
// first failed check. Run by scripts/try-vscode.sh (a manual check, not CI),
// which installs code-server and playwright-core and sets the environment:
//   CODE_URL   the code-server address, e.g. http://127.0.0.1:18081/
//   WORKSPACE  folder holding broken.stratum.yaml (a copy of
//              tests/conformance/refs/step-unknown-path.stratum.yaml) and
//              minimal-classifier.stratum.yaml (from examples/)
//   LOGS_DIR   code-server's logs folder (<user-data-dir>/logs)
//   SHOTS      folder for the PNG screenshots
//   CHROMIUM   the Chromium binary (default /usr/bin/chromium)
const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');

const env = (name, fallback) => {
  const value = process.env[name] || fallback;
  if (!value) throw new Error(`set ${name} (see the comment at the top of ${__filename})`);
  return value;
};
const CODE_URL = env('CODE_URL');
const WORKSPACE = env('WORKSPACE');
const LOGS_DIR = env('LOGS_DIR');
const SHOTS = env('SHOTS');
const CHROMIUM = env('CHROMIUM', '/usr/bin/chromium');
const TIMEOUT = 90_000;
const started = Date.now();

const log = (msg) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s] ${msg}`);
function check(ok, what, detail) {
  if (!ok) {
    console.error(`FAIL: ${what}${detail ? `\n${detail}` : ''}`);
    process.exitCode = 1;
    throw new Error(`check failed: ${what}`);
  }
  log(`ok: ${what}`);
}

// Every line of the extension host logs (code-server writes one folder per window).
function extensionHostLog() {
  const lines = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (/exthost\.log$/i.test(entry.name)) lines.push(...fs.readFileSync(full, 'utf8').split('\n'));
    }
  };
  if (fs.existsSync(LOGS_DIR)) walk(LOGS_DIR);
  return lines;
}

async function main() {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(TIMEOUT);
  const shot = async (name) => {
    const file = path.join(SHOTS, `${name}.png`);
    await page.screenshot({ path: file });
    log(`screenshot ${file}`);
  };
  const palette = async (command) => {
    await page.keyboard.press('F1');
    await page.locator('.quick-input-widget input').fill(`>${command}`);
    await page.locator('.quick-input-list .monaco-list-row.focused').waitFor();
    await page.keyboard.press('Enter');
  };
  const goTo = async (line, column) => {
    await page.keyboard.press('Control+G');
    await page.locator('.quick-input-widget input').fill(`:${line}:${column}`);
    await page.keyboard.press('Enter');
    await page.locator('#status\\.editor\\.selection').filter({ hasText: `Ln ${line}, Col ${column}` }).waitFor();
  };
  const openFile = async (name) => {
    await page.locator(`.explorer-folders-view .monaco-list-row[aria-label^="${name}"]`).click();
    await page.locator(`.tab.active[aria-label^="${name}"]`).waitFor();
    await page.locator('.monaco-editor .view-lines').first().click();
  };
  const problemsStatus = () => page.locator('#status\\.problems').getAttribute('aria-label');

  try {
    await page.goto(`${CODE_URL}?folder=${encodeURIComponent(WORKSPACE)}`);
    await page.locator('.monaco-workbench').waitFor();
    await page.locator('.explorer-folders-view .monaco-list-row').first().waitFor();
    log('workbench loaded');

    // Diagnostics: the broken spec gets S0403 at `text` in `${draft.output.text}`.
    await openFile('broken.stratum.yaml');
    // Either a squiggle, or an error notification (e.g. stratumc not found).
    const squiggle = page.locator('.monaco-editor .squiggly-error').first();
    const toast = page.locator('.notifications-toasts .notification-toast').filter({ hasText: /stratum/i }).first();
    await Promise.race([squiggle.waitFor(), toast.waitFor()]);
    check(await squiggle.isVisible(), 'a squiggle is shown in broken.stratum.yaml',
      (await toast.isVisible()) ? `notification instead: ${await toast.innerText()}` : undefined);
    await page.keyboard.press('Control+Shift+M');
    const problem = page.locator('.markers-panel .monaco-list-row').filter({ hasText: 'S0403' });
    await problem.first().waitFor();
    const problemText = await problem.first().innerText();
    check(/has no field `text`/.test(problemText) && /stratumc/.test(problemText),
      'Problems panel lists stratumc S0403 "`draft.output` (Draft) has no field `text`"', problemText);
    await shot('1-diagnostics');

    const activation = extensionHostLog();
    check(activation.some((l) => l.includes('_doActivateExtension stratumc.stratumc')),
      'the extension stratumc.stratumc was activated (extension host log)');
    check(!activation.some((l) => l.includes('Activating extension stratumc.stratumc failed')),
      'its activation did not fail', activation.filter((l) => l.includes('stratumc')).join('\n'));

    // Hover on the step id `draft` in `${draft.output.text}` (line 18).
    await goTo(18, 24);
    await palette('Show or Focus Hover');
    const hover = page.locator('.monaco-hover:not(.hidden) .hover-contents').filter({ hasText: 'draft' });
    await hover.first().waitFor();
    const hoverText = await hover.first().innerText();
    check(/step\s+draft/.test(hoverText) && /out:\s*Draft/.test(hoverText),
      'hover on `draft` shows the step and its out contract', hoverText);
    await shot('2-hover');
    await page.keyboard.press('Escape');

    // Go to definition: from `draft` (line 18) to `- id: draft` (line 14).
    await goTo(18, 24);
    await page.keyboard.press('F12');
    await page.locator('#status\\.editor\\.selection').filter({ hasText: /Ln 14, Col/ }).waitFor();
    check(true, 'go to definition jumps from `${draft...}` to the step `draft` (line 14)');
    await shot('3-definition');

    // Fix the error (text -> body, a field of Draft): the diagnostics go away.
    await goTo(18, 36);
    for (let i = 0; i < 4; i += 1) await page.keyboard.press('Shift+ArrowRight');
    await page.keyboard.type('body');
    await page.locator('.monaco-editor .squiggly-error').first().waitFor({ state: 'detached' });
    await page.locator('#status\\.problems').filter({ hasText: /^\D*0\D+0\D*$/ }).waitFor();
    check(true, `after the edit the errors are gone (status bar: ${await problemsStatus()})`);
    await shot('4-fixed');

    // A valid example: no diagnostics, hover on its step reference.
    await openFile('minimal-classifier.stratum.yaml');
    await goTo(16, 19);
    await palette('Show or Focus Hover');
    const hover2 = page.locator('.monaco-hover:not(.hidden) .hover-contents').filter({ hasText: 'classify_text' });
    await hover2.first().waitFor();
    const hover2Text = await hover2.first().innerText();
    check(/step\s+classify_text/.test(hover2Text) && /out:\s*SentimentResult/.test(hover2Text),
      'hover on `classify_text` in the valid example shows the step and its out contract', hover2Text);
    check(/^\D*0\D+0\D*$/.test(await page.locator('#status\\.problems').innerText()),
      `the valid example has no diagnostics (status bar: ${await problemsStatus()})`);
    await shot('5-valid-example');
    log('all checks passed');
  } catch (err) {
    process.exitCode = 1;
    console.error(err.message);
    await shot('failure').catch(() => {});
    const lines = extensionHostLog().filter((l) => /stratumc|\[error\]/.test(l));
    console.error(`extension host log (stratumc lines and errors):\n${lines.join('\n')}`);
  } finally {
    await browser.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
