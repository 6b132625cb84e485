/**
 * One encoding of an entry (teams/encoded.ts): the slices of `msg` and
 * `msg.payload` are exactly the encodings of those values alone, for bodies
 * whose lengths take every CBOR head width.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { CID } from 'multiformats/cid'
import { describe, expect, it } from 'vitest'
import { encodeEntry } from '../src/teams/encoded.js'
import type { Entry } from '../src/teams/records.js'

const cid = CID.parse('bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy')

function entry (text: string, extra: Record<string, unknown> = {}): Entry {
  return {
    seq: 70_000,
    epoch: 3,
    prev: 'bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy',
    msg: {
      payload: { v: 1, team: 'tabcdefghijklmnopqrstuvwxyz', from: 'did:key:z6Mk', id: 'x'.repeat(22), type: 'discuss', body: { text, ...extra }, ts: 1_767_225_600_000 },
      sig: new Uint8Array(64).fill(7)
    }
  } as unknown as Entry
}

describe('encodeEntry', () => {
  for (const size of [0, 23, 24, 255, 256, 65_535, 65_536, 70_000]) {
    it(`slices msg and payload for a ${size}-character text`, () => {
      const e = entry('a'.repeat(size), { n: -5, big: 2 ** 40, f: 1.5, ok: true, none: null, list: [1, [2, { k: 'v' }]], link: cid, raw: new Uint8Array(300) })
      const { bytes, msg, payload } = encodeEntry(e)
      expect(bytes).toEqual(dagCbor.encode(e))
      expect(msg).toEqual(dagCbor.encode(e.msg))
      expect(payload).toEqual(dagCbor.encode(e.msg.payload))
    })
  }
})
