/**
 * Custom layers of a node: started in order after the built-in layers,
 * stopped in reverse order before them; names are unique per node.
 */
import { LayerError } from './errors.js'
import { attempt } from './logging.js'
import type { IoaLayer, IoaNode } from './ioa-node.js'
import type { Logger } from '@libp2p/interface'

export class Layers {
  private readonly layers = new Map<string, IoaLayer>()

  constructor (private readonly log: Logger) {}

  get (name: string): IoaLayer | undefined {
    return this.layers.get(name)
  }

  /** Start custom layers in order; on a failure the node (and so the started ones) is stopped by the caller */
  async start (layers: IoaLayer[], node: IoaNode): Promise<void> {
    for (const layer of layers) {
      if (typeof layer?.name !== 'string' || layer.name === '' || typeof layer.start !== 'function') {
        throw new LayerError('A layer needs a non-empty name and a start(node) function')
      }
      if (this.layers.has(layer.name)) throw new LayerError(`Two layers are named ${layer.name}`)
      try {
        await layer.start(node)
      } catch (err) {
        throw new LayerError(`Layer ${layer.name} failed to start: ${(err as Error)?.message ?? err}`, { cause: err })
      }
      this.layers.set(layer.name, layer)
      this.log('layer %s started', layer.name)
    }
  }

  /** Stop every layer, the last started first */
  async stop (): Promise<void> {
    for (const layer of [...this.layers.values()].reverse()) {
      // a layer that fails to stop (even by throwing at once) does not keep the others up
      await attempt(this.log, `stopping layer ${layer.name}`, async () => { await layer.stop?.() })
    }
    this.layers.clear()
  }
}
