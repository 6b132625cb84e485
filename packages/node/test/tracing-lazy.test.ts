/**
 * Heavy dependencies load only when configured (issue 16): in a fresh
 * process, `import '@ioa/node'` loads no `@opentelemetry/*` module (the
 * collaboration layer's spans go through its own facade, spec/management.md
 * 3.3), a node with the management plane but no tracing loads no tracing
 * SDK (prom-client's own process metrics require the API); a node with
 * `management.tracing` loads the API and the SDK (so the check itself sees
 * them when they are there).
 */
import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

interface Loaded { esm: string[], cjs: string[] }

describe('the OpenTelemetry API and SDK load only with management.tracing', () => {
  it('import @ioa/node loads no @opentelemetry module, a node with metrics only no tracing SDK; a traced node loads them', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ioa-lazy-otel-'))
    try {
      const log = join(dir, 'loaded.txt')
      // a module hook in a fresh process notes every module the ESM loader loads (CommonJS ones are in require.cache)
      const hook = `import { appendFileSync } from 'node:fs'; export async function load (url, context, next) { appendFileSync(${JSON.stringify(log)}, url + '\\n'); return next(url, context) }`
      const script = [
        "import { register, createRequire } from 'node:module'",
        "import { readFileSync } from 'node:fs'",
        `register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}))`,
        'const otel = (s) => s.includes("/@opentelemetry/")',
        `const loaded = () => ({ esm: readFileSync(${JSON.stringify(log)}, 'utf8').split('\\n').filter(otel), cjs: Object.keys(createRequire(import.meta.url).cache).filter(otel), collab: readFileSync(${JSON.stringify(log)}, 'utf8').includes('/collab/dist/src/tasks/executor.js') })`,
        "const { createIoaNode } = await import('@ioa/node')",
        'const afterImport = loaded()',
        "const metered = await createIoaNode({ transport: { transports: ['tcp'] }, management: { http: '127.0.0.1:0' } })",
        'const afterMetrics = loaded()',
        "const traced = await createIoaNode({ transport: { transports: ['tcp'] }, management: { http: '127.0.0.1:0', tracing: { otlp: 'http://127.0.0.1:9/v1/traces' } } })",
        'const afterTracing = loaded()',
        'await traced.stop(); await metered.stop()',
        'process.stdout.write(JSON.stringify({ afterImport, afterMetrics, afterTracing }))'
      ].join('\n')
      const root = fileURLToPath(new URL('../../../', import.meta.url))
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', join(root, 'scripts/polyfill.js'), '--input-type=module', '-e', script], { cwd: root, timeout: 90_000 })
      const { afterImport, afterMetrics, afterTracing } = JSON.parse(stdout) as Record<string, Loaded & { collab: boolean }>
      // the hook saw the stack load (the collaboration layer's executor, whose spans would need the API)
      expect(afterImport.collab).toBe(true)
      expect(afterImport.esm).toEqual([])
      expect(afterImport.cjs).toEqual([])
      // metrics alone load no tracing SDK (prom-client's process metrics require the API by themselves)
      expect([...afterMetrics.esm, ...afterMetrics.cjs].filter(u => !u.includes('/@opentelemetry/api/'))).toEqual([])
      const all = [...afterTracing.esm, ...afterTracing.cjs]
      expect(all.some(u => u.includes('/@opentelemetry/api/'))).toBe(true)
      expect(all.some(u => u.includes('/@opentelemetry/sdk-trace-base/'))).toBe(true)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
