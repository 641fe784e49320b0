'use strict';

// index.d.ts is written by hand: check it against the code with the pinned TypeScript compiler
// (a devDependency). It must declare every export of src/index.js, and a program using the
// package as its README does must compile against it in strict mode.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const pkgDir = path.join(__dirname, '..');

/** @returns {typeof import('typescript') | undefined} */
function typescript() {
  try {
    return require('typescript');
  } catch {
    return undefined;
  }
}

const ts = typescript();
const skip = ts ? false : 'typescript is not installed (npm ci in sdks/node installs it)';

/** @param {readonly import('typescript').Diagnostic[]} diags */
function format(diags) {
  return ts.formatDiagnostics(diags, {
    getCanonicalFileName: (f) => f,
    getCurrentDirectory: () => pkgDir,
    getNewLine: () => '\n',
  });
}

/** One compilation of test/types/usage.ts, which loads index.d.ts through the package's "exports". */
function compile() {
  const configPath = path.join(__dirname, 'types', 'tsconfig.json');
  const config = ts.getParsedCommandLineOfConfigFile(configPath, {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(format([d])),
  });
  return ts.createProgram(config.fileNames, config.options);
}

test('index.d.ts', { skip }, async (t) => {
  const program = compile();
  const declFile = program.getSourceFile(path.join(pkgDir, 'index.d.ts'));

  await t.test('is what the package exports name for TypeScript', () => {
    assert.ok(declFile, 'compiling test/types/usage.ts did not load index.d.ts');
  });

  await t.test('compiles, and so does a program using the package as its README does', () => {
    const diags = ts.getPreEmitDiagnostics(program);
    assert.equal(diags.length, 0, format(diags));
  });

  await t.test('declares every option the Worker constructor reads', () => {
    const src = fs.readFileSync(path.join(pkgDir, 'src', 'worker.js'), 'utf8');
    const read = [...new Set([...src.matchAll(/\bopts\.(\w+)/g)].map((m) => m[1]))].sort();
    const checker = program.getTypeChecker();
    const moduleSymbol = checker.getSymbolAtLocation(/** @type {any} */ (declFile));
    const options = checker.getExportsOfModule(moduleSymbol).find((s) => s.getName() === 'WorkerOptions');
    assert.ok(options, 'index.d.ts has no WorkerOptions');
    const declared = checker.getDeclaredTypeOfSymbol(options).getProperties().map((p) => p.getName()).sort();
    assert.deepEqual(declared, read);
  });

  await t.test('declares every export of src/index.js and nothing else', () => {
    const checker = program.getTypeChecker();
    const moduleSymbol = checker.getSymbolAtLocation(/** @type {any} */ (declFile));
    const declared = checker.getExportsOfModule(moduleSymbol)
      .filter((s) => s.flags & ts.SymbolFlags.Value)
      .map((s) => s.getName())
      .sort();
    assert.deepEqual(declared, Object.keys(require('..')).sort());
  });
});
