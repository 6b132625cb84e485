// Bundle the dashboard page (dashboard/) into dist/dashboard/: index.html,
// dashboard.js (cytoscape and uPlot included, minified) and dashboard.css.
// Run by the root `npm run build` after `tsc -b`; the output is git-ignored.
// The management HTTP server reads these files from disk; no node imports them.
import { copyFile, mkdir } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = fileURLToPath(new URL('..', import.meta.url))
const out = `${root}dist/dashboard`

await mkdir(out, { recursive: true })
const result = await build({
  entryPoints: { dashboard: `${root}dashboard/main.js` },
  outdir: out,
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['chrome110', 'firefox110', 'safari16'],
  legalComments: 'eof',
  metafile: true,
  logLevel: 'warning'
})
await copyFile(`${root}dashboard/index.html`, `${out}/index.html`)
const bytes = Object.entries(result.metafile.outputs).map(([f, o]) => `${f.split('/').pop()} ${(o.bytes / 1024).toFixed(0)} KiB`)
if (process.argv.includes('--verbose')) console.log(`dashboard bundled: ${bytes.join(', ')}`)
