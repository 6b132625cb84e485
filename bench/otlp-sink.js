/**
 * An OTLP/HTTP sink for the `management` group's tracing path
 * (bench/management-paths.js): a node:http server on 127.0.0.1 that reads
 * and drops each export request, standing in for a collector. The group
 * starts it in the bench's own process (bench/management.js) and hands its
 * URL to the measured processes in `IOA_BENCH_OTLP`, so that receiving the
 * spans is not counted as the nodes' CPU (a real collector is elsewhere).
 */
import { createServer } from 'node:http'

/** The environment variable that names the sink's URL to a path's processes */
export const OTLP_SINK_ENV = 'IOA_BENCH_OTLP'

/** Start a sink (it does not keep the process alive): its URL, and how to stop it */
export async function startOtlpSink () {
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => { res.writeHead(200, { 'content-type': 'application/json' }).end('{}') })
  })
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', resolve)
  })
  server.unref()
  return {
    url: `http://127.0.0.1:${server.address().port}/v1/traces`,
    close: async () => new Promise(resolve => { server.closeAllConnections?.(); server.close(() => resolve()) })
  }
}
