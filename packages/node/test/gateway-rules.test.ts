/**
 * A node's gateway export rules (issue 11 item 12): a bad rule stops the
 * start with an error that names the config field.
 */
import { describe, expect, it } from 'vitest'
import { createIoaNode } from '../src/index.js'

describe('gateway export rules of a node', () => {
  it('names gateway.exports[i].skill when a rule is not a skill pattern', async () => {
    const start = createIoaNode({ transport: { transports: ['tcp'] }, gateway: { exports: [{ skill: 'shop.*' }, { skill: 'shop.**' }] } })
    await expect(start).rejects.toMatchObject({ name: 'BadRequestError', code: 'BAD_REQUEST', message: expect.stringContaining('gateway.exports[1].skill') })
  })
})
