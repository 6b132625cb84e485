/**
 * The cross-process benchmark harness (bench/cross-process.js, issue 15's
 * `task` group): each path runs between a server and a client child process
 * over TCP on 127.0.0.1, the client checks every answer, and every phase
 * reports the CPU time of both processes.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { compareCrossProcess, openCrossProcessPath } from '../bench/cross-process.js'

const PATHS = new URL('./fixtures/bench-paths.js', import.meta.url).href

interface Handle {
  name: string
  pids: { server: number, client: number }
  phase: (cmd: Record<string, unknown>) => Promise<Record<string, number | number[]>>
  close: () => Promise<void>
}

const open: Handle[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map(async p => p.close()))
})

async function start (name: string): Promise<Handle> {
  const p = await openCrossProcessPath(PATHS, name) as Handle
  open.push(p)
  return p
}

function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe('cross-process benchmark harness', () => {
  it('measures two paths, each between two processes of its own, with the CPU of both', async () => {
    const paths = [await start('net'), await start('libp2p-events')]
    const pids = paths.flatMap(p => [p.pids.server, p.pids.client])
    expect(new Set([...pids, process.pid]).size).toBe(5)
    const progress: string[] = []
    const profile = { rttWarmup: 20, warmBatch: 20, warmBatches: 3, rttCount: 60, throughputWarmupMs: 50, throughputMs: 200, rounds: 2 }
    const m = await compareCrossProcess(paths, { profile, depth: 4, progress: (msg: string) => progress.push(msg) }) as Map<string, Record<string, number>>
    expect([...m.keys()]).toEqual(['net', 'libp2p-events'])
    for (const r of m.values()) {
      expect(r.median).toBeGreaterThan(0)
      expect(r.p99).toBeGreaterThanOrEqual(r.median)
      expect(r.throughput).toBeGreaterThan(0)
      expect(r.cpuPerCall).toBeGreaterThan(0)
      expect(r.cpuPerCallSequential).toBeGreaterThan(0)
    }
    expect(progress.some(l => l.startsWith('round trips'))).toBe(true)
    // the warm-up ran batches until steady, at least the 20 calls of rttWarmup and at most 3 batches of 20
    const warmed = progress.filter(l => /^ {2}\S+: \d+ calls in \d+ batches/.test(l)).map(l => Number(/(\d+) calls/.exec(l)?.[1]))
    expect(warmed).toHaveLength(2)
    for (const n of warmed) expect(n).toBeGreaterThanOrEqual(20)
    for (const n of warmed) expect(n).toBeLessThanOrEqual(60)
    await Promise.all(open.splice(0).map(async p => p.close()))
    expect(pids.filter(alive)).toEqual([])
  })

  it('fails a phase whose answers are not the bytes sent, and the server adds its CPU', async () => {
    const corrupt = await start('corrupt')
    await expect(corrupt.phase({ cmd: 'sequential', count: 5 })).rejects.toThrow(/other bytes/)
    const good = await start('net')
    const r = await good.phase({ cmd: 'sequential', count: 50 })
    expect((r.samples as number[]).length).toBe(50)
    expect(r.cpu).toBeGreaterThan(0)
  })
})
