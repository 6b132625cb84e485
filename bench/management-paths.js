/**
 * The paths of the `management` benchmark group (bench/management.js): the
 * `task-envelope` path of bench/task-paths.js (IoaNode.submit of a task
 * with a signed envelope and a delegation, until completed, between two
 * OS processes on TCP 127.0.0.1), without and with the management plane
 * on both nodes: the server and the client both with `management.http` on
 * 127.0.0.1:0, so libp2p's Prometheus metrics and ours are recorded on
 * every task (and the HTTP server is up, unscraped).
 *
 * `task-tracing-on`: the same with `management.tracing` too, every trace
 * sampled (`sampleRatio: 1`), spans exported as OTLP/HTTP JSON to a sink
 * (bench/otlp-sink.js: a node:http server on 127.0.0.1 that reads and drops
 * each request) in the bench's own process, so the measured processes make,
 * batch, serialise and post the spans, and a collector elsewhere receives
 * them (run alone, a path starts a sink in its own process).
 */
import { OTLP_SINK_ENV, startOtlpSink } from './otlp-sink.js'
import { taskEnvelopePath } from './task-paths.js'

let sink
/** The URL of the OTLP sink: the bench process's (`IOA_BENCH_OTLP`), else one started in this process on first use */
function otlpSink () {
  const given = process.env[OTLP_SINK_ENV]
  if (given != null && given !== '') return given
  sink ??= startOtlpSink().then(s => s.url)
  return sink
}

/** The stack of this checkout, with `extra` merged into every node's options */
function stack (extra) {
  return async () => {
    const node = await import('@ioa/node')
    const options = typeof extra === 'function' ? await extra() : extra
    return {
      ...node,
      ...await import('@ioa/interconnect'),
      ...await import('@ioa/collab'),
      createIoaNode: (init) => node.createIoaNode({ ...init, ...options })
    }
  }
}

export const paths = {
  'task-metrics-off': taskEnvelopePath(stack({})),
  'task-metrics-on': taskEnvelopePath(stack({ management: { http: '127.0.0.1:0' } })),
  'task-tracing-on': taskEnvelopePath(stack(async () => ({
    management: { http: '127.0.0.1:0', tracing: { otlp: await otlpSink(), sampleRatio: 1, serviceName: 'bench' } }
  })))
}
