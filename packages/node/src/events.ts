/**
 * The node's events: what its executor did with the requests to hosted
 * agents (`onTask`: started, ended as the requester saw it, refused) and
 * what its domain gateway relayed or refused (`onGateway`).
 */
import type { GatewayExportedEvent } from '@ioa/interconnect'
import type { NodeEvents, NodeTaskEvent } from './ioa-node.js'
import type { RelayEvent } from '@ioa/collab'
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
