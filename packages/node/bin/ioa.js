#!/usr/bin/env node
// The `ioa` command-line tool (reference: docs/cli.md). It runs the built
// package: `npx tsc -b` at the repository root builds it.
import '@ioa/transport/polyfill'

let cli
try {
  cli = await import('../dist/src/cli/main.js')
} catch (err) {
  if (err?.code === 'ERR_MODULE_NOT_FOUND' && String(err?.message).includes('/dist/src/cli/main.js')) {
    process.stderr.write('ioa: the package is not built: run `npx tsc -b` at the repository root\n')
    process.exit(1)
  }
  throw err
}
await cli.run()
