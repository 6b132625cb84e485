/**
 * `ioa doctor` as a separate OS process against a node started by the test
 * over TCP (its management layer trusting the operator): with a grant that
 * expires within the warning period, the JSON report has that one warning
 * (exit 3) and the other checks pass; with the operator's own key and a
 * required capability nobody offers, the human report names the error and
 * what to do (exit 1); a key the node does not trust gets NOT_OPERATOR.
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { delegate, tokenCid } from '@ioa/collab'
import { encodeToken } from '@ioa/collab/wire'
import { createManagement } from '@ioa/management'
import { describe, expect, it } from 'vitest'
import { createIoaNode } from '../src/index.js'
import { ioa, keyFile } from './fixtures/cli-process.js'
import { scratch } from './fixtures/scratch.js'
import type { Token } from '@ioa/collab'
import type { DoctorReport } from '@ioa/management'

const { nodes, tempDir } = scratch('doctor-cli-')

async function tokenFile (dir: string, name: string, token: Token): Promise<string> {
  await writeFile(join(dir, name), Buffer.from(encodeToken(token)).toString('base64url') + '\n')
  return `@${name}`
}

describe('ioa doctor', () => {
  it('reports a grant about to expire (exit 3), a capability without provider (exit 1), and a key the node does not trust', async () => {
    const dir = await tempDir()
    const operator = await keyFile(dir, 'operator.key')
    const ops = await keyFile(dir, 'ops.key')
    const stranger = await keyFile(dir, 'stranger.key')
    const node = await createIoaNode({ layers: [createManagement({ operator: operator.did })] })
    nodes.push(node)
    await node.host({ key: 'echo', name: 'Echo', skills: [{ id: 'demo.echo' }] })
    // two more peers, so that the node's routing table is healthy
    for (let i = 0; i < 2; i++) nodes.push(await createIoaNode({ bootstrap: [node.addresses()[0]] }))
    const target = node.addresses()[0]

    // a grant that expires in one hour: a warning (default --warn-expiry 7d)
    const grant = await delegate(operator, { audience: ops.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + 3_600_000 })
    const run = await ioa(['doctor', '--node', target, '--key', 'ops.key', '--proof', await tokenFile(dir, 'ops.grant', grant), '--json', '--timeout', '20s'], dir)
    expect(run.code, run.stderr).toBe(3)
    const report = JSON.parse(run.stdout) as DoctorReport
    expect(report.worst).toBe('warn')
    expect(report.node).toBe(node.nodeIdentity.did)
    const bad = report.findings.filter(f => f.severity !== 'ok')
    expect(bad).toEqual([expect.objectContaining({ check: 'tokens', severity: 'warn', subject: (await tokenCid(grant)).toString(), fix: expect.any(String) })])
    expect(bad[0].message).toMatch(/expires in 60 min/)
    const checks = new Set(report.findings.map(f => f.check))
    for (const c of ['snapshot', 'reach', 'clock', 'dht', 'capabilities', 'tokens']) expect(checks).toContain(c)
    expect(report.snapshot?.agents.map(a => a.skills)).toEqual([['demo.echo']])

    // the operator's own key, and a capability nobody offers: an error, in words
    const human = await ioa(['doctor', '--node', target, '--key', 'operator.key', '--require', 'travel.nowhere', '--timeout', '20s'], dir)
    expect(human.code, human.stderr).toBe(1)
    expect(human.stdout).toMatch(/error\s+capabilities\s+travel\.nowhere: no provider in the network/)
    expect(human.stdout).toMatch(/→ host an agent with travel\.nowhere/)
    expect(human.stdout).toMatch(/1 error\(s\), 0 warning\(s\)/)

    // a key without the operator's authority: the snapshot is refused
    const refused = await ioa(['doctor', '--node', target, '--key', 'stranger.key', '--json', '--timeout', '20s'], dir)
    expect(refused.code, refused.stderr).toBe(1)
    const r = JSON.parse(refused.stdout) as DoctorReport
    expect(r.findings.find(f => f.check === 'snapshot')).toMatchObject({ severity: 'error', message: expect.stringContaining('NOT_OPERATOR') })
    expect(stranger.did).not.toBe(operator.did)
  }, 180_000)
})
