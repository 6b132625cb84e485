/**
 * `discover(query, { wait: { atLeast, timeout } })` (issue 11 item 14), over
 * TCP: the lookup is repeated until enough agents are found, so a program
 * needs no polling loop; it returns what it has when the time is up, and
 * refuses bounds out of range.
 */
import { describe, expect, it } from 'vitest'
import { rejectionOf } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'

const { nodes } = scratch('discover-wait-')

describe('discover with wait', () => {
  it('waits until atLeast agents are found, or the timeout', async () => {
    const seed = await createIoaNode()
    nodes.push(seed)
    const boot = [seed.addresses()[0]]
    const asker = await createIoaNode({ bootstrap: boot })
    nodes.push(asker)
    const hostsReady = (async () => {
      const dids: string[] = []
      for (const name of ['one', 'two']) {
        const n = await createIoaNode({ bootstrap: boot })
        nodes.push(n)
        dids.push((await n.host({ key: name, name, skills: [{ id: 'geo.route' }] })).did)
      }
      return dids
    })()
    // asked before the providers exist: one call, no loop
    const found = await asker.discover({ capability: 'geo.route' }, { wait: { atLeast: 2, timeout: 60_000 } })
    const dids = await hostsReady
    expect(found.map(f => f.card.id).sort()).toEqual([...dids].sort())

    // not enough agents: what was found, once the time is up
    const t0 = Date.now()
    const some = await asker.discover({ capability: 'geo.route' }, { wait: { atLeast: 3, timeout: 1_500 } })
    expect(some).toHaveLength(2)
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1_400)

    expect((await rejectionOf(asker.discover({ capability: 'geo.route' }, { wait: { atLeast: 0, timeout: 1_000 } }))).name).toBe('RangeError')
    expect((await rejectionOf(asker.discover({ capability: 'geo.route' }, { wait: { atLeast: 1, timeout: 10_000_000 } }))).name).toBe('RangeError')
  }, 120_000)
})
