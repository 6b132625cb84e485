// Lint for the whole repository. Besides code style it enforces the layering
// of ARCHITECTURE.md: a package may import only packages of lower layers and
// never another package's internals (anything but its public entry points).
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

// lowest layer first
const LAYERS = ['transport', 'interconnect', 'collab', 'management', 'node']

/** no-restricted-imports patterns for the package of the given layer */
function layerRules (layer) {
  const index = LAYERS.indexOf(layer)
  const higher = LAYERS.slice(index + 1)
  const patterns = [
    {
      group: ['@ioa/*/src', '@ioa/*/src/**', '@ioa/*/dist', '@ioa/*/dist/**'],
      message: 'Import a package by its public entry point, not its internals.'
    },
    {
      group: ['../../*/src', '../../*/src/**', '../../../packages/*/src/**'],
      message: 'Do not reach into another package\'s src/ by relative path.'
    }
  ]
  if (higher.length > 0) {
    patterns.push({
      group: higher.map(l => `@ioa/${l}`).concat(higher.map(l => `@ioa/${l}/**`)),
      message: `@ioa/${layer} is below ${higher.map(l => '@ioa/' + l).join(', ')} and must not import from them.`
    })
  }
  return {
    files: [`packages/${layer}/src/**/*.ts`],
    rules: {
      'no-restricted-imports': ['error', { patterns }]
    }
  }
}

export default tseslint.config(
  {
    ignores: ['**/dist/**', '**/node_modules/**', 'coverage/**', 'docs/api/**']
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        console: 'readonly',
        process: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        performance: 'readonly',
        URL: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        structuredClone: 'readonly',
        globalThis: 'readonly',
        Buffer: 'readonly'
      }
    },
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-console': 'off',
      eqeqeq: ['error', 'smart'],
      // on Node 20 a GC can collect a timeout signal inside AbortSignal.any before it fires, and the composite never aborts (nodejs/node#57736)
      'no-restricted-syntax': ['error', {
        selector: "CallExpression[callee.object.name='AbortSignal'][callee.property.name='any'] CallExpression[callee.object.name='AbortSignal'][callee.property.name='timeout']",
        message: 'AbortSignal.any with AbortSignal.timeout never aborts once a GC collected the timeout signal (Node 20, nodejs/node#57736): use anySignal from any-signal, and clear() it'
      }]
    }
  },
  ...LAYERS.map(layerRules),
  {
    // the dashboard page runs in the browser (bundled by packages/management/scripts/bundle.js)
    files: ['packages/management/dashboard/**/*.js'],
    languageOptions: {
      globals: { window: 'readonly', document: 'readonly', fetch: 'readonly', Node: 'readonly' }
    }
  }
)
