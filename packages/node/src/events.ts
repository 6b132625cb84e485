/**
 * The node's events: what hosted agents' handlers did (`onTask`) and what
 * its domain gateway relayed or refused (`onGateway`).
 */
import type { GatewayExportedEvent } from '@ioa/interconnect'
import type { NodeEvents, NodeTaskEvent } from './ioa-node.js'
import type { RelayEvent, SkillHandler } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** Listeners of one kind of event; a listener's failure is its own (logged, the others still hear) */
class Listeners<E> {
  private readonly listeners = new Set<(event: E) => void>()

  constructor (private readonly log: Logger) {}

  add (listener: (event: E) => void): () => void {
    this.listeners.add(listener)
    return () => { this.listeners.delete(listener) }
  }

  emit (event: E): void {
    for (const l of this.listeners) {
      try {
        l(event)
      } catch (err) {
        this.log.error('an event listener failed: %e', err)
      }
    }
  }
}

export class TaskEvents implements NodeEvents {
  readonly tasks: Listeners<NodeTaskEvent>
  readonly gateway: Listeners<RelayEvent>
  readonly exported: Listeners<GatewayExportedEvent>

  constructor (log: Logger) {
    this.tasks = new Listeners(log)
    this.gateway = new Listeners(log)
    this.exported = new Listeners(log)
  }

  onExported (listener: (event: GatewayExportedEvent) => void): () => void {
    return this.exported.add(listener)
  }

  onTask (listener: (event: NodeTaskEvent) => void): () => void {
    return this.tasks.add(listener)
  }

  onGateway (listener: (event: RelayEvent) => void): () => void {
    return this.gateway.add(listener)
  }

  emit (event: NodeTaskEvent): void {
    this.tasks.emit(event)
  }
}

function errorInfo (err: unknown): { code: string, message: string } {
  const e = err as { code?: unknown, message?: unknown } | undefined
  return {
    code: typeof e?.code === 'string' ? e.code : 'HANDLER_ERROR',
    message: typeof e?.message === 'string' ? e.message : String(err)
  }
}

/** The handler, reporting its start and end to `events` */
export function observed (events: TaskEvents, agent: Did, skill: string, handler: SkillHandler): SkillHandler {
  return async (input, ctx) => {
    const started = Date.now()
    const base = { agent, skill, taskId: ctx.task.id, caller: ctx.caller, root: ctx.chain.root }
    events.emit({ type: 'task-started', ...base, at: started })
    try {
      const out = await handler(input, ctx)
      const at = Date.now()
      events.emit({ type: 'task-completed', ...base, at, duration: at - started })
      return out
    } catch (err) {
      const at = Date.now()
      events.emit({ type: 'task-failed', ...base, at, duration: at - started, error: errorInfo(err) })
      throw err
    }
  }
}
