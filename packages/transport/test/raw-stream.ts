/**
 * Reading what a node answers on a raw libp2p stream, for tests that play a
 * hostile peer
 */
import { lpStream } from '@libp2p/utils'
import { decodeFrame } from '../src/index.js'
import type { Frame } from '../src/index.js'
import type { Stream } from '@libp2p/interface'

/** Read frames from a raw stream until it ends (`ended`) or `timeout` ms pass */
export async function readAll (stream: Stream, timeout = 5_000): Promise<{ frames: Frame[], ended: boolean }> {
  const lp = lpStream(stream)
  const frames: Frame[] = []
  const signal = AbortSignal.timeout(timeout)
  try {
    while (true) {
      frames.push(decodeFrame(await lp.read({ signal })))
    }
  } catch (err: any) {
    return { frames, ended: err.name !== 'AbortError' && err.name !== 'TimeoutError' }
  }
}
