// The `team` benchmark group (bench/index.js): teams of spec/teams.md.
//
// - delivery: a 10-member team, the convener (the sequencer) in this process
//   and 9 members on 9 TCP nodes in a child process. Latency of a message =
//   from the moment it is signed until the last member has it (clocks of one
//   machine: `performance.timeOrigin + performance.now()` in both processes).
//   Paths, interleaved in rounds:
//     team      the sequencer's own member posts (one hop to each member)
//     fanout    the baseline: the same signed message record sent over
//               long-lived direct streams to the same 9 peers, each verifying
//               the signature before it counts as received
//     via       a member in the child posts (member -> sequencer -> the others;
//               two hops, informative)
//   Target: team p95 <= 1.5x fanout p95.
// - formation: 5 members out of a 50-node network (memory transport, this
//   process) with 1,000 agents (20 capabilities, each on 10 nodes), the
//   convener on a 51st node, against the baseline of one discovery lookup
//   plus one round of 5 parallel task round trips to the 5 best candidates.
//   Target: <= 2x.
// - conversation (bench/teams-conversation.js): a 20-turn scripted
//   conversation with 2 sync and 3 async assignments across 2 processes,
//   against the critical path of its task times as plain task round trips.
//   Target: <= 1.2x. Also the messages and bytes the repetition filter saved.
//
// Standalone (after `npx tsc -b`): node --import ./scripts/polyfill.js bench/teams.js [--quick] [--delivery | --formation | --conversation]
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'
import { createTransportNode } from '@ioa/transport'
import { createIdentity, createInterconnect } from '@ioa/interconnect'
import { createTaskService, createTeamService, delegate } from '@ioa/collab'
import { signTeamRecord, verifyTeamRecord, newMessageId } from '@ioa/collab/wire'
import { multiaddr } from '@multiformats/multiaddr'
import { startChild } from './child.js'
import { percentile, rotate, row } from './measure.js'
import { conversation } from './teams-conversation.js'

const FANOUT = '/ioa/bench-team-fanout/1.0.0'
const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms))
const now = () => performance.timeOrigin + performance.now()

async function until (fn, timeout, what) {
  const start = Date.now()
  while (true) {
    const v = await fn()
    if (v !== undefined && v !== false) return v
    if (Date.now() - start > timeout) throw new Error(`${what} not met within ${timeout} ms`)
    await sleep(100)
  }
}

/** Pause between two messages of a path: low enough a rate that no path queues */
const GAP = 25

const TEAM_INIT = { heartbeat: 1_000, ackInterval: 250, rate: 10_000, burst: 10_000, historyBytes: 64 * 1024 * 1024 }

// ---------------------------------------------------------------------------
// the child: 9 members

async function childMain (count) {
  const members = []
  const receipts = { team: new Map(), fanout: new Map(), via: new Map() }
  const record = (path, key, member) => {
    const at = now()
    let m = receipts[path].get(key)
    if (m == null) { m = new Map(); receipts[path].set(key, m) }
    if (!m.has(member)) m.set(member, at)
  }
  for (let i = 0; i < count; i++) {
    const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
    const ic = await createInterconnect(node, { requestTimeout: 5_000 })
    const agent = await ic.host({ key: `member-${i}`, name: `member ${i}`, skills: [{ id: 'team.member' }] })
    const teams = createTeamService(ic, TEAM_INIT)
    await teams.start()
    await node.services.messaging.handle(FANOUT, 'msg', async (payload) => {
      const msg = payload.msg
      if (await verifyTeamRecord('message', msg, msg.payload.from)) record('fanout', msg.payload.body.text, i)
      return null
    })
    ;(async () => {
      for await (const e of teams.events()) {
        if (e.type !== 'team') continue
        ;(async () => {
          for await (const t of e.team.events({ from: 0 })) {
            if (t.type === 'message' && t.message.payload.type === 'discuss') {
              const text = t.message.payload.body.text
              record(text.startsWith('via') ? 'via' : 'team', text, i)
            }
          }
        })().catch(() => {})
      }
    })().catch(() => {})
    members.push({ node, ic, agent, teams })
  }
  process.stdout.write(JSON.stringify({ refs: members.map(m => ({ agent: m.agent.did, peer: m.node.peerId.toString(), addr: m.node.getMultiaddrs()[0].toString() })) }) + '\n')
  const lines = createInterface({ input: process.stdin })
  for await (const line of lines) {
    const cmd = JSON.parse(line)
    if (cmd.cmd === 'post') {
      const t = members[0].teams.team(cmd.team)
      process.stdout.write(JSON.stringify({ posted: cmd.text, sent: now() }) + '\n')
      t.say(cmd.text).catch((err) => { process.stderr.write(`post failed: ${err.message}\n`) })
    } else if (cmd.cmd === 'report') {
      const out = {}
      for (const [path, byKey] of Object.entries(receipts)) {
        out[path] = Object.fromEntries([...byKey].map(([k, m]) => [k, [...m.values()]]))
      }
      process.stdout.write(JSON.stringify({ receipts: out }) + '\n')
    } else if (cmd.cmd === 'stop') {
      break
    }
  }
  for (const m of members) { await m.teams.stop(); await m.ic.stop(); await m.node.stop() }
  process.exit(0)
}

// ---------------------------------------------------------------------------
// delivery

async function delivery ({ quick, progress }) {
  const count = 9
  const perRound = quick ? 20 : 50
  const rounds = quick ? 2 : 4
  /** the child's post times (`{ posted, sent }` lines); every other line answers a command */
  const posted = new Map()
  const child = startChild(import.meta.url, ['--members', String(count)], (e) => {
    if (e.posted == null) return false
    posted.set(e.posted, e.sent)
    return true
  })
  const { next, send } = child
  const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
  const ic = await createInterconnect(node, { requestTimeout: 5_000 })
  const teams = createTeamService(ic, TEAM_INIT)
  try {
    const { refs } = await next()
    progress(`${count} members up in the child process`)
    for (const r of refs) await node.dial(multiaddr(r.addr))
    const convener = await ic.host({ key: 'convener', name: 'convener', skills: [{ id: 'team.lead' }] })
    await teams.start()
    const team = await teams.form(convener.did, { text: 'bench', capabilities: ['team.member'], deadline: Date.now() + 3_600_000 }, {
      roles: refs.map((r, i) => ({ role: `m${i}`, capabilities: ['team.member'], candidates: [{ agent: r.agent, peer: r.peer }] }))
    })
    progress(`team of ${team.roster.members.length} formed`)
    await until(() => team.stable >= 0 || undefined, 30_000, 'members caught up')
    const sentAt = { team: new Map(), fanout: new Map(), via: new Map() }
    const paths = {
      team: async (k) => {
        const text = `team ${k}`
        sentAt.team.set(text, now())
        await team.say(text)
      },
      fanout: async (k) => {
        const text = `fanout ${k}`
        sentAt.fanout.set(text, now())
        const msg = await signTeamRecord('message', { v: 1, team: team.id, from: convener.did, id: newMessageId(), type: 'discuss', body: { text }, ts: Date.now() }, convener.identity)
        // not awaited, as a post is not: every path is paced the same way (open loop)
        for (const r of refs) {
          node.services.messaging.request(multiaddr(r.addr), FANOUT, 'msg', { msg }).catch(err => { progress(`fanout to ${r.peer} failed: ${err.message}`) })
        }
      },
      via: async (k) => {
        const text = `via ${k}`
        send({ cmd: 'post', team: team.id, text })
        sentAt.via.set(text, undefined)
      }
    }
    // warm-up
    for (let k = 0; k < 10; k++) for (const p of Object.values(paths)) { await p(`w${k}`); await sleep(GAP) }
    await sleep(500)
    for (const s of Object.values(sentAt)) s.clear()
    let k = 0
    for (let r = 0; r < rounds; r++) {
      for (const name of rotate(Object.keys(paths), r)) {
        for (let i = 0; i < perRound; i++) {
          await paths[name](k++)
          await sleep(GAP)
        }
      }
      progress(`round ${r + 1}/${rounds}`)
    }
    await sleep(3_000)
    for (const text of sentAt.via.keys()) sentAt.via.set(text, posted.get(text))
    send({ cmd: 'report' })
    const { receipts } = await next()
    const stats = {}
    for (const path of Object.keys(paths)) {
      const expect = path === 'via' ? count - 1 : count
      const lat = []
      for (const [text, t0] of sentAt[path]) {
        if (t0 == null) continue
        const got = receipts[path][text] ?? []
        if (got.length >= expect) lat.push(Math.max(...got) - t0)
      }
      lat.sort((a, b) => a - b)
      stats[path] = { p50: percentile(lat, 50), p95: percentile(lat, 95), n: lat.length, sent: sentAt[path].size }
      progress(`${path}: ${lat.length}/${sentAt[path].size} delivered to all, p50 ${stats[path].p50.toFixed(2)} ms, p95 ${stats[path].p95.toFixed(2)} ms`)
    }
    send({ cmd: 'stop' })
    return [
      row('team.deliver.p50', stats.team.p50, 'ms', stats.fanout.p50),
      row('team.deliver.p95', stats.team.p95, 'ms', stats.fanout.p95, { max: 1.5 }),
      row('team.deliver-via-member.p50', stats.via.p50, 'ms', stats.fanout.p50),
      row('team.deliver-via-member.p95', stats.via.p95, 'ms', stats.fanout.p95),
      row('team.deliver.delivered', stats.team.n / stats.team.sent, 'ratio', 1)
    ]
  } finally {
    await child.stop()
    await teams.stop().catch(() => {})
    await ic.stop().catch(() => {})
    await node.stop()
  }
}

// ---------------------------------------------------------------------------
// formation

async function mapLimit (items, limit, fn) {
  const out = []
  let i = 0
  await Promise.all(Array.from({ length: limit }, async () => {
    while (i < items.length) { const k = i++; out[k] = await fn(items[k]) }
  }))
  return out
}

async function formation ({ quick, progress }) {
  const size = 50
  const perNode = 20
  const rounds = quick ? 3 : 10
  const nodes = []
  const ics = []
  const services = []
  try {
    progress(`starting ${size} nodes on the memory transport`)
    for (let i = 0; i < size; i++) nodes.push(await createTransportNode({ transports: ['memory'], listen: [`/memory/bench-team-${process.pid}-${i}`] }))
    await mapLimit(nodes.map((_, i) => i), 10, async (i) => {
      for (const j of [(i + 1) % size, (i + 7) % size]) await nodes[i].dial(nodes[j].getMultiaddrs()[0], { signal: AbortSignal.timeout(10_000) }).catch(() => {})
    })
    progress('waiting for routing tables (>= 30 peers each, at most 120 s)')
    for (let t = 0; t < 600 && nodes.some(n => n.services.dht.routingTable.size < 30); t++) await sleep(200)
    for (const n of nodes) ics.push(await createInterconnect(n, { domain: 'bench.example', announceAgentIds: false, announceConcurrency: 2, requestTimeout: 5_000 }))
    // 1,000 agents: 20 capabilities of 50 agents each, 20 agents a node;
    // a node's agents share 4 capabilities, so each capability is held on 10
    // nodes (200 provider records to announce instead of 1,000: the set-up
    // takes minutes less, and a team's 5 members still come from several nodes)
    progress(`hosting ${size * perNode} agents`)
    await mapLimit(nodes.map((_, i) => i), 5, async (i) => {
      const tasks = createTaskService(ics[i])
      const teams = createTeamService(ics[i], TEAM_INIT)
      await teams.start()
      services.push(tasks, teams)
      for (let a = 0; a < perNode; a++) {
        const cap = `bench.team.c${(i + (a % 4)) % 20}`
        const agent = await ics[i].host({ key: `a-${a}`, name: `Agent ${i}/${a}`, description: `agent ${a} of node ${i}`, skills: [{ id: cap }] })
        await tasks.serve(agent.did, cap, (input) => ({ ok: true, input }))
      }
    })
    progress('waiting for announcements')
    await Promise.all(ics.map(ic => ic.announced({ signal: AbortSignal.timeout(600_000) })))
    // the convener on a node of its own (a node does not dial itself: an agent
    // hosted beside the convener could be neither invited nor asked a task)
    const cnode = await createTransportNode({ transports: ['memory'], listen: [`/memory/bench-team-${process.pid}-convener`] })
    nodes.push(cnode)
    for (const j of [0, 25]) await cnode.dial(nodes[j].getMultiaddrs()[0], { signal: AbortSignal.timeout(10_000) })
    for (let t = 0; t < 300 && cnode.services.dht.routingTable.size < 20; t++) await sleep(200)
    const ic = await createInterconnect(cnode, { domain: 'bench.example', announceAgentIds: false, requestTimeout: 5_000 })
    ics.push(ic)
    const tasks = createTaskService(ic)
    const teams = createTeamService(ic, TEAM_INIT)
    await teams.start()
    services.push(tasks, teams)
    const user = await createIdentity()
    const convener = await ic.host({ key: 'convener', name: 'convener', skills: [{ id: 'bench.lead' }] })
    const grant = await delegate(user, { audience: convener.did, capabilities: [{ skill: 'bench.*' }], expiresAt: Date.now() + 3_600_000 })
    const form = []
    const base = []
    for (let r = 0; r < rounds + 1; r++) {
      const cap = `bench.team.c${r % 20}`
      const paths = {
        formation: async () => {
          const t0 = performance.now()
          const team = await teams.form(convener.did, { text: 'bench formation', capabilities: [cap], deadline: Date.now() + 3_600_000 }, {
            roles: Array.from({ length: 5 }, (_, i) => ({ role: `m${i}`, capabilities: [cap] })), proofs: [grant], cache: false, discoveryTimeout: 10_000
          })
          const t = performance.now() - t0
          if (team.roster.members.length !== 6) throw new Error(`formed ${team.roster.members.length - 1} of 5`)
          await team.conclude('bench')
          return t
        },
        baseline: async () => {
          const t0 = performance.now()
          const found = await ic.discoverAll({ capability: cap }, { cache: false, timeout: 10_000 })
          if (found.length < 5) throw new Error(`found ${found.length} providers`)
          const token = await delegate(convener.identity, { audience: found[0].card.id, capabilities: [{ skill: `${cap}.*` }], expiresAt: Date.now() + 1_800_000, proofs: [grant] })
          await Promise.all(found.slice(0, 5).map(async (d) => {
            const tk = d === found[0] ? token : await delegate(convener.identity, { audience: d.card.id, capabilities: [{ skill: `${cap}.*` }], expiresAt: Date.now() + 1_800_000, proofs: [grant] })
            await tasks.submitAndWait(convener.identity, d.card.id, { skill: cap, input: { x: 1 }, proofs: [tk, grant] })
          }))
          return performance.now() - t0
        }
      }
      for (const name of rotate(Object.keys(paths), r)) {
        const t = await paths[name]()
        if (r === 0) continue // warm-up
        ;(name === 'formation' ? form : base).push(t)
      }
      if (r > 0) progress(`round ${r}/${rounds}: formation ${form.at(-1).toFixed(0)} ms, baseline ${base.at(-1).toFixed(0)} ms`)
    }
    const med = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)] }
    return [
      row('team.formation-5-of-1000.median', med(form), 'ms', med(base), { max: 2 })
    ]
  } finally {
    for (const s of services) await s.stop().catch(() => {})
    for (const ic of ics) await ic.stop().catch(() => {})
    await Promise.all(nodes.map(n => n.stop().catch(() => {})))
  }
}

export const teamGroup = {
  name: 'team',
  title: 'teams: delivery to a 10-member team across 2 processes (baseline: the same signed frame over direct streams), formation of 5 out of 1,000 agents (baseline: one lookup + one round of 5 parallel tasks), a 20-turn conversation with 5 assignments (baseline: the critical path of its task times as plain tasks)',
  async run (ctx) {
    return [...await delivery(ctx), ...await formation(ctx), ...await conversation(ctx)]
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const i = process.argv.indexOf('--members')
  if (i > 0) {
    await childMain(Number(process.argv[i + 1]))
  } else {
    const quick = process.argv.includes('--quick')
    const only = process.argv.includes('--delivery') ? delivery : process.argv.includes('--formation') ? formation : process.argv.includes('--conversation') ? conversation : teamGroup.run
    const rows = await only({ quick, progress: (m) => process.stderr.write(`[team] ${m}\n`) })
    for (const r of rows) console.log(JSON.stringify(r))
    process.exit(0)
  }
}
