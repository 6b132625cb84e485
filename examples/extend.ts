/**
 * A custom layer on a node: the hotel node runs the audit layer
 * (`examples/audit-layer.ts`) and lets the auditor's node read its log. The
 * auditor books a room (on the driver's delegation), then fetches the log
 * and gets verified entries.
 *
 * Run it with `npm run build && npx tsx examples/extend.ts`.
 */
import { createIoaNode } from '@ioa/node'
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { pathToFileURL } from 'node:url'
import { auditLayer, fetchAudit } from './audit-layer.js'
import type { AuditEntry, AuditLayer } from './audit-layer.js'

export async function main ({ log = console.log, signal = AbortSignal.timeout(60_000) } = {}): Promise<AuditEntry[]> {
  const auditor = await createIoaNode()
  // #region install
  const hotels = await createIoaNode({
    bootstrap: auditor.addresses(),
    layers: [auditLayer({ readers: [auditor.transport.peerId], maxEntries: 50 })]
  })
  // #endregion
  try {
    const hotel = await hotels.host({
      key: 'hotel',
      name: 'Seaside Hotel',
      skills: [{ id: 'travel.hotel.booking' }],
      handlers: { 'travel.hotel.booking': () => ({ booked: true }) }
    }, { signal })
    await hotels.interconnect.announced({ signal })

    const agent = await auditor.host({ key: 'auditor', name: 'Auditor', skills: [{ id: 'audit.read' }] }, { signal })
    const driver = await createIdentity()
    const grant = await delegate(driver, { audience: agent.did, capabilities: [{ skill: 'travel.hotel.booking' }], expiresAt: Date.now() + 60_000 })
    const task = await auditor.tasks.submitAndWait(agent.identity, hotel.did, { skill: 'travel.hotel.booking', input: {}, proofs: [grant] }, { signal })
    log(`task ${task.id}: ${task.state}`)

    // #region read
    await hotels.layer<AuditLayer>('audit')?.flush()
    const { entries, head } = await fetchAudit(auditor, hotels.transport.peerId, { limit: 20, signal })
    for (const e of entries) log(`#${e.seq} ${e.skill} for ${e.caller}: ${e.outcome} in ${e.duration} ms (${e.hash.slice(0, 12)}…)`)
    log(`${entries.length} of ${head} entries, chain verified`)
    // #endregion
    return entries
  } finally {
    await hotels.stop()
    await auditor.stop()
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => { console.error(err); process.exitCode = 1 })
}
