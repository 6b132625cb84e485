// Bundle the lazily loaded libp2p stack (dist/src/stack/*.js, see
// src/stack.ts) into dist/bundle/: one ES module per piece plus shared
// chunks. Run by the root `npm run build` after `tsc -b`; the output is
// git-ignored. `--verbose` prints what went in.
//
// What stays out of the bundle (external, imported by name at run time):
// every package that the stack's own packages already load when they are
// imported — found by importing them in a child process with a module hook
// that records each module's file — so that there is one copy of each
// (@libp2p/interface's error classes, @libp2p/utils, multiformats, …)
// whether a module came through the bundle or not. A package is external
// only when the bundle's directory resolves its name to the same copy as
// the importing module does; a nested copy of another version is bundled.
import { execFileSync } from 'node:child_process'
import { realpathSync } from 'node:fs'
import { mkdir, readdir, rm } from 'node:fs/promises'
import { join, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = fileURLToPath(new URL('..', import.meta.url))
const out = join(root, 'dist', 'bundle')
// every module of src/stack/ is a piece (src/stack.ts loads each by its name)
const stackDir = join(root, 'dist', 'src', 'stack')
const pieces = (await readdir(stackDir)).filter(f => f.endsWith('.js')).map(f => f.slice(0, -3))
const verbose = process.argv.includes('--verbose')

/** The packages (their directories) loaded by importing the stack's packages */
function loadedAtImport () {
  // the hook runs on the loader thread: it posts every file it loads to the main thread
  const hook = `let port
export function initialize (data) { port = data.port }
export async function load (url, context, next) {
  if (url.startsWith('file:')) port.postMessage(url)
  return next(url, context)
}`
  const script = `
    import { register } from 'node:module'
    import { fileURLToPath } from 'node:url'
    const files = new Set()
    const { port1, port2 } = new MessageChannel()
    port1.on('message', (url) => files.add(fileURLToPath(url)))
    register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}), { data: { port: port2 }, transferList: [port2] })
    for (const m of ['@ioa/transport', '@ioa/transport/internal', '@ioa/interconnect', '@ioa/collab', '@ioa/collab/wire', '@ioa/node', '@ioa/management']) await import(m)
    // the last messages from the loader thread
    await new Promise(resolve => setTimeout(resolve, 100))
    port1.close()
    process.stdout.write(JSON.stringify([...files]))
  `
  const files = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 }))
  const dirs = new Set()
  for (const file of files) {
    const dir = packageDir(realpathSync(file))
    if (dir != null) dirs.add(dir)
  }
  if (dirs.size === 0) throw new Error('bundle-stack: found no package loaded at import (is the stack built?)')
  return dirs
}

/** The directory of the npm package a file belongs to (below its last node_modules/), or undefined */
function packageDir (file) {
  const marker = `${sep}node_modules${sep}`
  const at = file.lastIndexOf(marker)
  if (at < 0) return undefined
  const rest = file.slice(at + marker.length).split(sep)
  const depth = rest[0].startsWith('@') ? 2 : 1
  return file.slice(0, at + marker.length) + rest.slice(0, depth).join(sep)
}

const shared = loadedAtImport()
const externalised = new Set()
const bundledCopies = new Set()

/** esbuild plugin: a bare import of a package loaded at import is external when the bundle resolves it to the same copy */
const sharedExternal = {
  name: 'shared-external',
  setup (b) {
    b.onResolve({ filter: /^[^./]/ }, async (args) => {
      if (args.pluginData?.inner === true || args.kind === 'entry-point') return undefined
      const from = await b.resolve(args.path, { kind: args.kind, resolveDir: args.resolveDir, pluginData: { inner: true } })
      if (from.errors.length > 0 || from.external || from.path === '' || !from.path.includes(`${sep}node_modules${sep}`)) return undefined
      const dir = packageDir(realpathSync(from.path))
      if (dir == null || !shared.has(dir)) return undefined
      const fromBundle = await b.resolve(args.path, { kind: args.kind, resolveDir: out, pluginData: { inner: true } })
      if (fromBundle.errors.length === 0 && fromBundle.path !== '' && packageDir(realpathSync(fromBundle.path)) === dir) {
        externalised.add(dir)
        return { path: args.path, external: true }
      }
      bundledCopies.add(dir)
      return undefined
    })
  }
}

await rm(out, { recursive: true, force: true })
await mkdir(out, { recursive: true })
const result = await build({
  entryPoints: Object.fromEntries(pieces.map(p => [p, join(stackDir, `${p}.js`)])),
  outdir: out,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // CommonJS dependencies inside call require() for Node's built-in modules
  banner: { js: "import { createRequire as __ioaCreateRequire } from 'node:module'; const require = __ioaCreateRequire(import.meta.url);" },
  plugins: [sharedExternal],
  legalComments: 'eof',
  metafile: true,
  logLevel: 'warning'
})
if (verbose) {
  const inputs = Object.keys(result.metafile.inputs).length
  const bytes = Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0)
  console.log(`stack bundled: ${inputs} modules, ${(bytes / 1024).toFixed(0)} KiB in ${Object.keys(result.metafile.outputs).length} files under ${out}`)
  console.log(`external (loaded at import): ${[...externalised].map(d => d.slice(d.lastIndexOf('node_modules') + 13)).sort().join(', ')}`)
  if (bundledCopies.size > 0) console.log(`bundled although loaded at import (another copy resolves from the bundle): ${[...bundledCopies].join(', ')}`)
}
