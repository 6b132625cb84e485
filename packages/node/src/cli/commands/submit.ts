/**
 * `ioa submit`: ask an agent (named, or the best one found for a
 * capability) to run a skill, and follow the task until it ends.
 */
import { randomUUID } from 'node:crypto'
import { CLIENT_OPTIONS, bootstrapList, clientDataDir, parseDid, parseDuration, readJsonArgument, timeoutOf } from '../args.js'
import { CliError, UsageError, asUsage, errorReport } from '../errors.js'
import { compact, elapsed, toJson } from '../output.js'
import type { CommandSpec } from '../args.js'
import type { Output } from '../output.js'
import type { TaskEvent, TaskSnapshot, Token } from '@ioa/collab'
import type { Identity } from '@ioa/interconnect'
import type { IoaNode } from '../../ioa-node.js'

/** Lifetime of the token a sender signs for itself when no --proof is given, without a deadline */
const SELF_GRANT_TTL = 600_000
/** Longest --deadline */
const MAX_DEADLINE = 86_400_000

export const submitCommand: CommandSpec = {
  name: 'submit',
  summary: 'submit a task to an agent and follow its progress',
  usage: ['submit --key <sender key file> (--to <did> | --capability <capability>) [--skill <skill>] [--input <json|@file>] [--proof <token|@file>]... [--deadline <duration>] --bootstrap <multiaddr>... [--json]'],
  description: [
    'Sends a signed task request for --skill to the agent --to, or to the best-ranked agent found for',
    '--capability (--skill defaults to it), prints the task id at once, then every event as it comes',
    'and the result. The sender\'s authority is the --proof chain: its leaf is a token addressed to the',
    'sender, or an invocation token the sender issued to the executor (--to; with --capability the',
    'provider is then that audience) whose proofs lead back to the user: the executor is then the',
    'audience of the chain and may delegate it further. Without --proof the sender signs itself a',
    'token for this one skill and agent (the executor accepts it unless it trusts only given roots).',
    'Exit 0 only when the task completed; 1 with the task\'s error code otherwise. Ctrl-C stops',
    'following (the task goes on: see ioa task).',
    'With --json: JSON lines {"type":"task",…}, then each task event ({"type":"status"|"artifact"|',
    '"heartbeat"|"lapsed",…,"at"}), then {"type":"result","taskId","state","result"|"error"}.'
  ].join('\n'),
  options: {
    key: { type: 'string', value: '<file>', description: 'the sender\'s key file (signs the request)' },
    to: { type: 'string', value: '<did>', description: 'the agent to run the task' },
    capability: { type: 'string', value: '<capability>', description: 'find the agent: the best ranked one offering --skill under this capability' },
    skill: { type: 'string', value: '<skill>', description: 'the skill to run (default: --capability)' },
    input: { type: 'string', value: '<json|@file>', description: 'the task input, JSON or @file (default null)' },
    proof: { type: 'string', multiple: true, value: '<token|@file>', description: 'the delegation chain: leaf addressed to the sender, or issued by it to --to (repeatable)' },
    deadline: { type: 'string', value: '<duration>', description: 'the task fails with DEADLINE_EXCEEDED if still running after this, e.g. 30s' },
    ...CLIENT_OPTIONS
  },
  examples: [
    'ioa submit --key car.key --capability travel.hotel.booking --input \'{"nights":1}\' --proof @car.token --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…',
    'ioa submit --key me.key --to did:key:z6Mk… --skill demo.echo --input @input.json --deadline 30s --json'
  ],
  async run (args, ctx) {
    const [{ delegate }, { assertCapability }, { withClient }, { readKeyFile }, { readTokens }] = await Promise.all([
      import('@ioa/collab'), import('@ioa/interconnect'), import('../client.js'), import('../keyfile.js'), import('../tokens.js')
    ])
    const key = await readKeyFile(args.required('key'), ctx.cwd)
    const toText = args.string('to')
    const capability = args.string('capability')
    if ((toText == null) === (capability == null)) throw new UsageError('submit: give either --to <did> or --capability <capability>', toText == null ? '--to' : '--capability')
    const target = toText != null ? await parseDid(toText, '--to') : undefined
    const skill = args.string('skill') ?? capability
    if (skill == null) throw new UsageError('submit: missing required option --skill', '--skill')
    try {
      const check = assertCapability as (name: string) => void
      check(skill)
      if (capability != null) check(capability)
    } catch (err) {
      asUsage(err, '--skill')
    }
    const inputText = args.string('input')
    const input = inputText != null ? await readJsonArgument(inputText, '--input', ctx.cwd) : null
    const deadlineText = args.string('deadline')
    const deadlineMs = deadlineText != null ? parseDuration(deadlineText, '--deadline', MAX_DEADLINE) : undefined
    const given = await readTokens(args.strings('proof'), '--proof', ctx.cwd)
    const proofs = given.length > 0 ? await chainFor(key.identity, given, target) : []
    // an invocation token names its executor
    const invoked = proofs[0]?.payload.aud !== key.identity.did ? proofs[0]?.payload.aud : undefined
    const bootstrap = await bootstrapList(args, ctx)
    const timeout = timeoutOf(args)
    const out = ctx.out

    return withClient({ bootstrap, dataDir: clientDataDir(args, ctx), timeout, signal: ctx.signal, out }, async ({ node }) => {
      const to = target ?? await pickProvider(node, capability as string, skill, timeout, ctx.signal, out, invoked)
      const deadline = deadlineMs != null ? Date.now() + deadlineMs : undefined
      const chain = proofs.length > 0
        ? proofs
        : [await delegate(key.identity, { audience: to, capabilities: [{ skill }], expiresAt: Math.max(deadline ?? 0, Date.now() + SELF_GRANT_TTL) })]
      return follow(node, key.identity, to, { skill, input, proofs: chain, deadline }, out, ctx.signal)
    })
  }
}

/**
 * The proofs in the order of a task request: the leaf first, an invocation
 * token (issued by the sender to the executor, `to` when known) when there
 * is one, else the token addressed to the sender. The chain is verified here
 * so that a broken one is a usage error, not a remote refusal.
 */
async function chainFor (sender: Identity, tokens: Token[], to?: string): Promise<Token[]> {
  const { verifyChain } = await import('@ioa/collab')
  const invocation = tokens.find(t => t.payload.iss === sender.did && t.payload.aud !== sender.did && (to == null || t.payload.aud === to))
  const leaf = invocation ?? tokens.find(t => t.payload.aud === sender.did)
  if (leaf == null) {
    throw new UsageError(`--proof: no token is addressed to the sender ${sender.did}, nor issued by it to ${to ?? 'the executor'}`, '--proof', 'PRINCIPAL_MISMATCH')
  }
  const rest = tokens.filter(t => t !== leaf)
  try {
    await verifyChain(leaf, rest)
  } catch (err) {
    asUsage(err, '--proof')
  }
  return [leaf, ...rest]
}

async function pickProvider (node: IoaNode, capability: string, skill: string, timeout: number, signal: AbortSignal, out: Output, only?: string): Promise<string> {
  out.progress(`looking up ${capability}…`)
  const found = await node.interconnect.discoverAll({ capability }, { timeout, cache: false, signal })
  // an invocation token can only be used at its audience
  const offering = found.filter(r => r.card.skills.some(s => s.id === skill) && (only == null || r.card.id === only))
  out.progress(`${found.length} agent${found.length === 1 ? '' : 's'}${offering.length !== found.length ? `, ${offering.length} offering ${skill}` : ''}`)
  const best = offering[0]
  if (best == null) throw new CliError('NO_PROVIDER', `No agent offering ${skill} found for ${capability}`)
  out.progress(`chose ${best.card.name} ${best.card.id} (score ${best.score.toFixed(2)})`)
  return best.card.id
}

interface Request { skill: string, input: unknown, proofs: Token[], deadline?: number }

async function follow (node: IoaNode, sender: Identity, to: string, request: Request, out: Output, signal: AbortSignal): Promise<number> {
  const taskId = randomUUID()
  const t0 = Date.now()
  if (out.json) out.emit({ type: 'task', taskId, to, skill: request.skill, at: t0 })
  else out.print(`task ${taskId}  ${request.skill} → ${to}`)
  return followEvents(node.tasks.submit(sender, to, { ...request, taskId }, { signal }), taskId, to, t0, out, signal)
}

/**
 * Print a task's events as they come (JSON lines with --json) and end with
 * its outcome: 0 when it completed, a CliError with its error code otherwise
 */
export async function followEvents (events: AsyncIterable<TaskEvent>, taskId: string, to: string, t0: number, out: Output, signal: AbortSignal): Promise<number> {
  let last: TaskSnapshot | undefined
  let lapsed: TaskEvent & { type: 'lapsed' } | undefined
  let shownState: string | undefined
  let shownMessages = 0
  try {
    for await (const event of events) {
      const at = Date.now()
      if (out.json) out.emit({ ...event, at })
      if (event.type === 'status' || event.type === 'artifact') last = event.task
      if (event.type === 'lapsed') lapsed = event
      if (out.json) continue
      if (event.type === 'status') {
        const task = event.task
        // progress messages not shown yet (a snapshot keeps the newest ones)
        const fresh = task.messages.slice(Math.min(shownMessages, task.messages.length))
        shownMessages = task.messages.length
        if (task.state !== shownState && fresh.length === 0 && task.state !== 'completed') out.print(`${elapsed(at, t0, 2)}  ${task.state}`)
        shownState = task.state
        for (const m of fresh) out.print(`${elapsed(at, t0, 2)}  ${task.state}  ${typeof m === 'string' ? m : compact(m)}`)
      } else if (event.type === 'artifact') {
        out.print(`${elapsed(at, t0, 2)}  artifact  ${compact(event.artifact)}`)
      } else if (event.type === 'lapsed') {
        out.print(`${elapsed(at, t0, 2)}  lapsed  ${event.error.message}`)
      }
    }
  } catch (err) {
    const report = errorReport(err)
    if (out.json) out.emit({ type: 'result', taskId, state: last?.state ?? null, error: { code: report.code, message: report.message } })
    if (signal.aborted && last != null) out.progress(`stopped following: the task goes on (ioa task ${taskId} --to ${to})`)
    throw err
  }

  const state = last?.state
  if (state === 'completed') {
    if (out.json) {
      out.emit({ type: 'result', taskId, state, result: last?.result ?? null })
    } else {
      out.print(`${elapsed(Date.now(), t0, 2)}  completed`)
      out.print(toJson(last?.result ?? null, 2))
    }
    return 0
  }
  const error = lapsed?.error ?? last?.error ?? { code: 'TASK_NOT_COMPLETED', message: `The task ended ${state ?? 'without a state'}` }
  if (out.json) out.emit({ type: 'result', taskId, state: state ?? null, error })
  throw new CliError(error.code, `task ${taskId} ${lapsed != null ? 'lapsed' : state ?? 'ended'}: ${error.message}`)
}
