/**
 * Benchmark of delegation chain verification (`verifyChain` of @ioa/collab):
 * time per link of a 3-link and an 8-link chain, against one bare Ed25519
 * signature verification measured in the same run (the baseline: each link
 * costs at least one signature check).
 *
 * The signing bytes and the token codec come from the `@ioa/collab/wire`
 * subpath (what layers and wire implementers need).
 *
 *   npx tsc -b && node --import ./scripts/polyfill.js bench/collab-chain.js [--quick]
 *
 * prints one JSON row per line. As a module it exports `benchChainVerify`,
 * which returns rows `{ name, value, unit, baseline, ratio }` for
 * `bench/index.js` (see bench/README.md, "Adding benchmarks").
 */
import { pathToFileURL } from 'node:url'
import { createIdentity } from '@ioa/interconnect'
import { delegate, verifyChain } from '@ioa/collab'
import { encodeToken, tokenSigningBytes } from '@ioa/collab/wire'

const PROFILES = {
  default: { warmup: 200, chainRuns: 2000, verifyRuns: 20_000, rounds: 4 },
  quick: { warmup: 50, chainRuns: 300, verifyRuns: 3000, rounds: 2 }
}

const HOUR = 3_600_000

/** A chain of `links` tokens, each narrower than its parent; returns leaf and pool */
async function makeChain (links, now) {
  const ids = []
  for (let i = 0; i <= links; i++) ids.push(await createIdentity())
  const tokens = []
  for (let i = 0; i < links; i++) {
    tokens.push(await delegate(ids[i], {
      audience: ids[i + 1].did,
      capabilities: [
        { skill: 'travel.*', constraints: { maxAmount: 1000 - i, currency: ['EUR', 'USD'] } },
        { skill: 'payment.pay', constraints: { maxAmount: 1000 - i, currency: ['EUR'] } }
      ],
      notBefore: now - HOUR,
      expiresAt: now + HOUR - i,
      proofs: tokens.slice(-1)
    }))
  }
  return { leaf: tokens[tokens.length - 1], pool: tokens.slice(0, -1), bytes: encodeToken(tokens[0]).byteLength }
}

/** Mean time of `fn` over `runs` calls, in microseconds */
async function timeIt (fn, runs) {
  const start = performance.now()
  for (let i = 0; i < runs; i++) await fn()
  return (performance.now() - start) * 1000 / runs
}

const round3 = x => Math.round(x * 1000) / 1000

/**
 * @param {{ quick?: boolean, progress?: (msg: string) => void }} [options]
 * @returns {Promise<Array<{ name: string, value: number, unit: string, baseline: number, ratio: number }>>}
 */
export async function benchChainVerify ({ quick = false, progress = () => {} } = {}) {
  const profile = quick ? PROFILES.quick : PROFILES.default
  const now = Date.now()
  const chains = { 3: await makeChain(3, now), 8: await makeChain(8, now) }

  // the baseline: one Ed25519 verification of a token's signing bytes, with
  // the public key already parsed (what each link costs at the very least)
  const signer = await createIdentity()
  const sample = chains[3].leaf
  const data = tokenSigningBytes(sample.payload)
  const sig = await signer.sign(data)
  const key = signer.publicKey
  if (!await key.verify(data, sig)) throw new Error('baseline signature does not verify')

  const paths = {
    ed25519: { runs: profile.verifyRuns, call: async () => { if (!await key.verify(data, sig)) throw new Error('bad signature') } },
    3: { runs: profile.chainRuns, call: () => verifyChain(chains[3].leaf, chains[3].pool, { now }) },
    8: { runs: profile.chainRuns, call: () => verifyChain(chains[8].leaf, chains[8].pool, { now }) }
  }

  // warm up every path, then let them take turns so drift hits all alike
  for (const p of Object.values(paths)) await timeIt(p.call, profile.warmup)
  const totals = { ed25519: 0, 3: 0, 8: 0 }
  const names = Object.keys(paths)
  for (let r = 0; r < profile.rounds; r++) {
    for (let k = 0; k < names.length; k++) {
      const name = names[(r + k) % names.length]
      const p = paths[name]
      totals[name] += await timeIt(p.call, Math.ceil(p.runs / profile.rounds))
    }
    progress(`collab-chain: round ${r + 1}/${profile.rounds}`)
  }
  const ed = totals.ed25519 / profile.rounds
  const perLink = links => totals[links] / profile.rounds / links

  return [
    { name: 'ed25519.verify', value: round3(ed), unit: 'us', baseline: round3(ed), ratio: 1 },
    { name: 'verifyChain.perLink.3', value: round3(perLink(3)), unit: 'us', baseline: round3(ed), ratio: round3(perLink(3) / ed) },
    { name: 'verifyChain.perLink.8', value: round3(perLink(8)), unit: 'us', baseline: round3(ed), ratio: round3(perLink(8) / ed) }
  ]
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const quick = process.argv.includes('--quick')
  const rows = await benchChainVerify({ quick, progress: msg => process.stderr.write(msg + '\n') })
  for (const row of rows) console.log(JSON.stringify(row))
}
