/**
 * The paths of the `management` benchmark group (bench/management.js): the
 * `task-envelope` path of bench/task-paths.js (IoaNode.submit of a task
 * with a signed envelope and a delegation, until completed, between two
 * OS processes on TCP 127.0.0.1), without and with the management plane
 * on both nodes: the server and the client both with `management.http` on
 * 127.0.0.1:0, so libp2p's Prometheus metrics and ours are recorded on
 * every task (and the HTTP server is up, unscraped).
 *
 * Tracing on/off (issue 16's second target, ≤ 15 % at 100 % sampling) adds
 * a `task-tracing-on` path here once the node has tracing.
 */
import { taskEnvelopePath } from './task-paths.js'

/** The stack of this checkout, with `extra` merged into every node's options */
function stack (extra) {
  return async () => {
    const node = await import('@ioa/node')
    return {
      ...node,
      ...await import('@ioa/interconnect'),
      ...await import('@ioa/collab'),
      createIoaNode: (init) => node.createIoaNode({ ...init, ...extra })
    }
  }
}

export const paths = {
  'task-metrics-off': taskEnvelopePath(stack({})),
  'task-metrics-on': taskEnvelopePath(stack({ management: { http: '127.0.0.1:0' } }))
}
