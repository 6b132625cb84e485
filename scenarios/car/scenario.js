// Scenario 1, the car assistant: "book me a hotel for tonight".
//
// The driver (a user key on the phone) delegates to the car agent: routes,
// hotel bookings, and payments of at most 300 EUR. The car agent plans route →
// book → pay, finds the map agent, three hotel groups (Budget Inns, whose
// booking backend is down; Riviera Hotels, inside its own domain network
// behind a gateway that exports only bookings, only to cars.example; Alpine
// Lodges) and the payment agent through the DHT, fails over from Budget Inns,
// and pays within the cap under a chain the payment agent verifies back to
// the driver.
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { delegate, tokenCid } from '@ioa/collab'

export const TONIGHT = 'book a hotel for tonight'
const CAP = 300

/** Look up a capability from the driver's node until `enough` agents answer */
async function discover (ctx, capability, enough, timeout = 15_000) {
  const until = Date.now() + timeout
  let found = []
  while (Date.now() < until && !ctx.signal.aborted) {
    found = await ctx.driver.node.discover({ capability }, { cache: false, timeout: 3_000 }).catch(() => [])
    if (found.length >= enough) break
    await new Promise(resolve => setTimeout(resolve, 250))
  }
  return found
}

const IOA = fileURLToPath(new URL('../../packages/node/bin/ioa.js', import.meta.url))

/**
 * An outsider that learned the address of a node runs `ioa agents --peer
 * <addr>` (its own process and peer id) to list the node's cards: its exit
 * code, error line and the cards it printed, if any
 */
async function outsiderListsCards (addr, signal) {
  const home = await mkdtemp(join(tmpdir(), 'ioa-outsider-'))
  try {
    const child = spawn(process.execPath, [IOA, 'agents', '--peer', addr, '--json', '--timeout', '8s', '--data-dir', home], { stdio: ['ignore', 'pipe', 'pipe'], signal })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', c => { stdout += c })
    child.stderr.setEncoding('utf8').on('data', c => { stderr += c })
    const code = await new Promise(resolve => {
      child.once('error', () => resolve(null))
      child.once('close', c => resolve(c))
    })
    const parse = text => { try { return JSON.parse(text) } catch { return undefined } }
    return { code, error: parse(stderr.trim().split('\n').at(-1) ?? '')?.error, cards: parse(stdout) }
  } finally {
    await rm(home, { recursive: true, force: true })
  }
}

export default {
  name: 'car-assistant',
  title: 'Car assistant: "book me a hotel for tonight"',
  userKey: 'keys/driver.json',
  nodes: [
    { name: 'car', config: 'car/car.json' },
    { name: 'maps', config: 'car/map.json' },
    { name: 'budget-inns', config: 'car/budget-inns.json' },
    { name: 'alpine', config: 'car/alpine.json' },
    { name: 'riviera-gateway', config: 'car/riviera-gateway.json' },
    { name: 'riviera-hotel', config: 'car/riviera-hotel.json', bootstrapFromGateway: 'riviera-gateway' },
    { name: 'payment', config: 'car/payment.json' }
  ],

  async run (ctx) {
    const steps = []
    const checks = []
    const step = (name, since, extra = {}) => steps.push({ name, ms: Date.now() - since, ...extra })
    const check = (name, ok, detail) => checks.push({ name, ok: Boolean(ok), detail })
    const driver = ctx.driver.identity
    const carDid = ctx.node('car').did('car')
    // meanwhile, an outsider tries the Riviera hotel's node directly (it knows the address)
    const outsider = outsiderListsCards(ctx.node('riviera-hotel').ready.addresses[0], ctx.signal)

    // 1. the network can see every capability the plan needs
    let t = Date.now()
    const wanted = [['geo.route', 1], ['travel.hotel.book', 3], ['payment.pay', 1]]
    const seen = {}
    for (const [capability, n] of wanted) {
      const found = await discover(ctx, capability, n)
      seen[capability] = found
      ctx.timeline('driver', `discovered ${capability}: ${found.map(a => `${a.card.name} (${a.card.domain}${a.peer !== a.card.peer ? ', via gateway' : ''})`).join(', ') || 'nothing'}`)
    }
    const hidden = await ctx.driver.node.discover({ capability: 'hospitality.housekeeping.schedule' }, { cache: false, timeout: 3_000 }).catch(() => [])
    ctx.timeline('driver', `discovered hospitality.housekeeping.schedule: ${hidden.length === 0 ? 'nothing (not exported by the Riviera gateway)' : hidden.map(a => a.card.name).join(', ')}`)
    step('discover', t, { found: Object.fromEntries(Object.entries(seen).map(([k, v]) => [k, v.length])) })
    const riviera = seen['travel.hotel.book'].find(a => a.card.name === 'Riviera Hotels')
    check('every capability found through the DHT', wanted.every(([c, n]) => seen[c].length >= n), wanted.map(([c]) => `${c}: ${seen[c].length}`).join(', '))
    check('Riviera is reached through its gateway, its internal skill is not exported',
      riviera != null && riviera.peer === ctx.node('riviera-gateway').ready.peerId && hidden.length === 0,
      riviera != null ? `card served by ${riviera.peer === ctx.node('riviera-gateway').ready.peerId ? 'the gateway' : riviera.peer}; housekeeping found ${hidden.length}×` : 'Riviera not found')

    // the gateway exports bookings to cars.example only: the driver's phone is refused
    let refusedCode = 'none'
    if (riviera != null) {
      const self = await delegate(driver, { audience: riviera.card.id, capabilities: [{ skill: 'travel.hotel.book' }], expiresAt: Date.now() + 60_000 })
      try {
        await ctx.driver.node.tasks.submitAndWait(driver, riviera.card.id, { skill: 'travel.hotel.book', input: { near: { city: 'Lyon' }, nights: 1 }, proofs: [self] }, { signal: ctx.signal })
        refusedCode = 'accepted'
      } catch (err) {
        refusedCode = err?.code ?? String(err)
      }
      ctx.timeline('driver', `direct booking request to Riviera Hotels from the phone (people.example): ${refusedCode === 'accepted' ? 'accepted?!' : `refused by the gateway (${refusedCode})`}`)
    }
    check('the gateway refuses bookings from other domains', refusedCode === 'NOT_EXPORTED', `direct request from people.example: ${refusedCode}`)

    // the hotel's node is in Riviera's private network (a pre-shared key):
    // knowing its address is not enough to connect and list its cards
    const probe = await outsider
    const leaked = Array.isArray(probe.cards) ? probe.cards.flatMap(c => c.skills ?? []) : []
    ctx.timeline('outsider', `ioa agents --peer <the Riviera hotel's node>: ${probe.code === 0 ? `listed skills ${JSON.stringify(leaked)}?!` : `refused (${probe.error?.code ?? `exit ${probe.code}`}): the domain network is private`}`)
    check('an outsider that knows the hotel node\'s address cannot list its cards', probe.code !== 0 && probe.code != null && probe.cards == null,
      `ioa agents: exit ${probe.code}${probe.error != null ? `, ${probe.error.code}` : ''}`)

    // 2. the driver's consent
    t = Date.now()
    const token = await delegate(driver, {
      audience: carDid,
      capabilities: [
        { skill: 'vehicle.assistant.*' },
        { skill: 'geo.*' },
        { skill: 'travel.hotel.*' },
        { skill: 'payment.pay', constraints: { maxAmount: CAP, currency: 'EUR' } }
      ],
      expiresAt: Date.now() + 3_600_000
    })
    ctx.timeline('driver', `delegated to the car assistant: vehicle.assistant.*, geo.*, travel.hotel.*, payment.pay ≤ ${CAP} EUR for 1 h (token ${(await tokenCid(token)).toString().slice(-10)})`)
    step('delegate', t)

    // 3. the goal, followed to the end
    t = Date.now()
    ctx.timeline('driver', `"book me a hotel for tonight" → car assistant`)
    const deadline = Date.now() + 25_000
    let result
    let failure
    for await (const e of ctx.driver.node.tasks.submit(driver, carDid, {
      skill: 'vehicle.assistant.goal',
      input: {
        intent: TONIGHT,
        input: { position: { name: 'A6 near Avallon', lat: 47.4897, lon: 3.9077 }, destination: 'Marseille', nights: 1, guest: 'C. Martin' }
      },
      proofs: [token],
      deadline
    }, { signal: ctx.signal })) {
      if (e.type === 'status' && e.task.state === 'completed') result = e.task.result
      if (e.type === 'status' && ['failed', 'rejected', 'canceled'].includes(e.task.state)) failure = e.task.error
      if (e.type === 'lapsed') failure = e.error
    }
    step('goal', t)
    if (failure != null) ctx.timeline('driver', `goal failed: ${failure.code} ${failure.message}`)
    if (result != null) {
      ctx.timeline('driver', `confirmed: ${result.booking.hotel.name}, ${result.booking.amount} ${result.booking.currency}, ref ${result.booking.reservation}, paid (${result.payment.receipt})`)
    }
    for (const [id, s] of Object.entries(result?.steps ?? {})) steps.push({ name: id, by: s.providers.join(', '), attempts: s.attempts })

    // 4. what the agents report, from their own processes
    await new Promise(resolve => setTimeout(resolve, 300))
    const bookings = ['budget-inns', 'alpine', 'riviera-hotel'].flatMap(n => ctx.node(n).events.filter(e => e.event === 'booked').map(e => ({ node: n, ...e.data })))
    const payments = ctx.node('payment').events.filter(e => e.event === 'paid').map(e => e.data)
    const failovers = ctx.node('car').events.filter(e => e.event === 'failover').map(e => e.data)
    const budgetFailed = ctx.node('budget-inns').events.some(e => e.event === 'task-failed')
    check('goal completed', result != null, failure != null ? `${failure.code}: ${failure.message}` : `${Date.now() - t} ms`)
    check('failed over from the failing hotel agent', budgetFailed && failovers.some(f => f.fromName === 'Budget Inns'),
      failovers.map(f => `${f.fromName} (${f.code}) → ${f.toName}`).join('; ') || 'no failover')
    const relayed = ctx.node('riviera-gateway').events.filter(e => e.event === 'gateway-relayed' && e.data.skill === 'travel.hotel.book' && e.data.domain === 'cars.example')
    check('booked exactly once, behind the gateway', bookings.length === 1 && bookings[0].node === 'riviera-hotel' && relayed.length === 1,
      (bookings.map(b => `${b.node}: ${b.reservation} ${b.amount} ${b.currency}`).join('; ') || 'no booking') + `; relayed by the gateway ${relayed.length}×`)
    const pay = payments[0]
    check('paid once, within the cap', payments.length === 1 && pay.amount <= CAP && pay.amount === bookings[0]?.amount && pay.cap <= CAP,
      pay != null ? `${pay.amount} ${pay.currency} (driver's cap ${CAP}, delegated cap ${pay.cap})` : 'no payment')
    check('payment chain rooted at the driver', pay != null && pay.root === driver.did && pay.depth === 2 && pay.issuers[pay.issuers.length - 1] === driver.did,
      pay != null ? `depth ${pay.depth}: ${pay.issuers.map(i => i === driver.did ? 'driver' : i === carDid ? 'car' : i.slice(0, 14)).reverse().join(' → ')} → payment` : 'no payment')

    return {
      steps,
      checks,
      outcome: {
        booking: result?.booking ?? null,
        payment: result?.payment ?? null,
        bookings: bookings.length,
        payments: payments.length,
        paidAmount: pay?.amount ?? null,
        cap: CAP,
        delegatedCap: pay?.cap ?? null,
        chainDepth: pay?.depth ?? null,
        chainRoot: pay?.root ?? null,
        driver: driver.did,
        failovers
      }
    }
  }
}
