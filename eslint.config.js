// One lint setup for the whole repo. Type-aware rules catch floating promises;
// import-x forbids cycles; process.env is read only by libs/config and the CLI.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';

export default tseslint.config(
  // tour.ts: the README's tour has a reader save a game there; it is not one of the project's sources.
  { ignores: ['**/node_modules/**', '**/dist/**', '.crowdplay/**', 'loadtest/reports/**', 'services/gateway/public/**/*.js', 'tour.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { 'import-x': importX },
    settings: { 'import-x/ignore': ['node_modules'], 'import-x/resolver-next': [importX.createNodeResolver({ extensions: ['.ts', '.js', '.mjs', '.json'] })] },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite', 'before', 'after', 'beforeEach', 'afterEach'] }] },
      ],
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
      'no-restricted-properties': ['error', { object: 'process', property: 'env', message: 'Read settings from the Config object (libs/config); only the CLI passes process.env to loadConfig.' }],
    },
  },
  {
    files: ['libs/config/**/*.ts', 'services/cli/src/main.ts', 'services/cli/src/cli.ts', 'libs/testing/**/*.ts', 'scripts/**', '**/test/**/*.ts', 'loadtest/src/**/*.ts'],
    rules: { 'no-restricted-properties': 'off' },
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
  {
    // Outside projects on Node 20 (docs/guides/first-game.md).
    files: ['examples/**/*.js'],
    languageOptions: { globals: { fetch: 'readonly', setTimeout: 'readonly' } },
  },
);
