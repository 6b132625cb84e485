/**
 * A guard around the Yamux muxer for a race of @chainsafe/libp2p-yamux 8
 * (checked against 8.0.1): a new outbound stream sends its opening window
 * update in a microtask, and when the connection closed in between (a peer
 * that connects and leaves at once, a node stopping while a protocol opens
 * its stream on connect, as gossipsub does) the write throws
 * `StreamStateError` inside that microtask: an uncaught exception that
 * ends the process. Control frames (window update, ping, go-away) written
 * to a connection already closed are dropped here with a log line instead;
 * data frames are left alone (their writers handle the error). When the
 * muxer has no `sendFrame` where expected (another version), nothing
 * changes.
 */
import { logger } from '@libp2p/logger'
import type { StreamMuxerFactory } from '@libp2p/interface'

const log = logger('ioa:transport:muxer')

/** Yamux's frame type of data frames (the other types are control frames) */
const DATA_FRAME = 0

interface FrameSender {
  sendFrame?: (header: { type: number }, data?: unknown) => boolean
}

/** Wrap a muxer factory so that control frames on a closed connection are dropped, not thrown */
export function guardControlFrames<C> (factory: (components: C) => StreamMuxerFactory): (components: C) => StreamMuxerFactory {
  return (components: C) => {
    const inner = factory(components)
    const create = inner.createStreamMuxer.bind(inner)
    inner.createStreamMuxer = (conn) => {
      const muxer = create(conn)
      const sender = muxer as unknown as FrameSender
      const send = sender.sendFrame
      if (typeof send !== 'function') {
        log('the stream muxer has no sendFrame: control frames after close are not guarded')
        return muxer
      }
      sender.sendFrame = function (header, data) {
        if (header.type === DATA_FRAME) return send.call(this, header, data)
        try {
          return send.call(this, header, data)
        } catch (err: any) {
          if (err?.name !== 'StreamStateError') throw err
          // the connection closed before this frame could go: nothing left to control
          log.trace('dropped a control frame (type %d) for a closed connection: %s', header.type, err.message)
          return false
        }
      }
      return muxer
    }
    return inner
  }
}
