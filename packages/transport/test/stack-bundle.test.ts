/**
 * The stack bundle (src/stack.ts, scripts/bundle-stack.js): after
 * `npm run build`, a node's libp2p stack loads from dist/bundle/ in a few
 * files instead of ~200 modules, and works the same; `IOA_STACK_BUNDLE=0`
 * loads it module by module. Each case runs in a fresh process with a
 * module hook that notes every module loaded after the import of
 * `@ioa/transport`, and makes two TCP nodes exchange a messaging request.
 */
import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const root = fileURLToPath(new URL('../../../', import.meta.url))
const bundleDir = join(root, 'packages/transport/dist/bundle')

interface Trial { afterImport: string[], answer: string }

let dir: string

/** Import @ioa/transport in a fresh process, then start two nodes and make one request; the modules loaded after the import */
async function trial (env: Record<string, string>): Promise<Trial> {
  const log = join(dir, `loaded-${Object.keys(env).join('-') || 'default'}.txt`)
  const hook = `import { appendFileSync } from 'node:fs'; export async function load (url, context, next) { appendFileSync(${JSON.stringify(log)}, url + '\\n'); return next(url, context) }`
  const script = [
    "import { register } from 'node:module'",
    "import { readFileSync } from 'node:fs'",
    `register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}))`,
    "const { createTransportNode } = await import('@ioa/transport')",
    `const before = new Set(readFileSync(${JSON.stringify(log)}, 'utf8').split('\\n'))`,
    "const a = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })",
    "const b = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })",
    "await a.services.messaging.handle('/ioa/test-bundle/1.0.0', 'echo', (payload) => ({ echoed: payload.text }))",
    'await b.dial(a.getMultiaddrs()[0])',
    "const answer = await b.services.messaging.request(a.peerId, '/ioa/test-bundle/1.0.0', 'echo', { text: 'over the bundle' }, { timeout: 20000 })",
    'await b.stop(); await a.stop()',
    `const afterImport = readFileSync(${JSON.stringify(log)}, 'utf8').split('\\n').filter(u => u !== '' && !before.has(u))`,
    'process.stdout.write(JSON.stringify({ afterImport, answer: answer.echoed }))'
  ].join('\n')
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', join(root, 'scripts/polyfill.js'), '--input-type=module', '-e', script], {
    cwd: root, timeout: 90_000, env: { ...process.env, ...env }
  })
  return JSON.parse(stdout) as Trial
}

describe('the libp2p stack bundle', () => {
  beforeAll(async () => { dir = await mkdtemp(join(tmpdir(), 'ioa-stack-bundle-')) })
  afterAll(async () => { await rm(dir, { recursive: true, force: true }) })

  it('is built by npm run build', () => {
    expect(existsSync(join(bundleDir, 'core.js')), 'dist/bundle/core.js: run `npm run build`').toBe(true)
  })

  it('a node loads its stack from the bundle in a few files, and nodes talk over TCP', async () => {
    const { afterImport, answer } = await trial({})
    expect(answer).toBe('over the bundle')
    expect(afterImport.some(u => u.endsWith('/transport/dist/bundle/core.js'))).toBe(true)
    expect(afterImport.some(u => u.endsWith('/transport/dist/bundle/tcp.js'))).toBe(true)
    // none of the bundled packages is loaded again from its own files
    const bundled = ['/node_modules/libp2p/', '/node_modules/@chainsafe/libp2p-noise/', '/node_modules/@chainsafe/libp2p-yamux/', '/node_modules/@libp2p/kad-dht/', '/node_modules/@libp2p/tcp/', '/node_modules/@libp2p/identify/']
    expect(afterImport.filter(u => bundled.some(b => u.includes(b)))).toEqual([])
    // what is left are the packages shared with the layers above (e.g. @libp2p/utils' 50 modules), which @ioa/transport alone does not import
    expect(afterImport.length).toBeLessThan(110)
  }, 120_000)

  it('IOA_STACK_BUNDLE=0 loads the stack module by module, and nodes talk the same', async () => {
    const { afterImport, answer } = await trial({ IOA_STACK_BUNDLE: '0' })
    expect(answer).toBe('over the bundle')
    expect(afterImport.some(u => u.includes('/transport/dist/bundle/'))).toBe(false)
    expect(afterImport.some(u => u.includes('/node_modules/libp2p/dist/src/index.js'))).toBe(true)
    expect(afterImport.length).toBeGreaterThan(250)
  }, 120_000)
})
