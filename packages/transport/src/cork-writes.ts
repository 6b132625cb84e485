/**
 * The writes of one event-loop turn to a TCP connection leave in one
 * syscall. Below the messaging streams every Noise message is written as two
 * buffers (its 2-byte length, its ciphertext) and Yamux answers each data
 * frame it receives with a window update of its own: a request and its
 * answer cost four socket writes at each end. Corking the socket for the
 * rest of the turn (`socket.cork()`, `uncork()` at the end of the turn,
 * after the messaging streams wrote their frames: `turn-end.ts`) hands them
 * to the kernel as one `writev`: the window update and the answer or the
 * next request written after it in the same turn go together. Nothing on the wire
 * changes (the same bytes, in the same order).
 *
 * Applied to the connection the encrypter secures, when it is a TCP socket
 * of @libp2p/tcp (checked against 11.x: a `socket` with `cork`/`uncork`);
 * any other connection (WebSockets, in-memory, one behind a private-network
 * protector) is left as it is. Backpressure is unchanged: a corked socket
 * still reports a full buffer, and the uncork drains it.
 */
import { uncorkAtTurnEnd } from './turn-end.js'
import type { ConnectionEncrypter, MessageStream } from '@libp2p/interface'

/** What a TCP connection of @libp2p/tcp carries */
interface Corkable {
  cork(): void
  uncork(): void
  destroyed?: boolean
}

/** Cork `connection`'s socket for the rest of the turn at its first write of each turn */
export function corkTurns (connection: MessageStream): MessageStream {
  const socket = (connection as { socket?: Partial<Corkable> }).socket
  if (typeof socket?.cork !== 'function' || typeof socket.uncork !== 'function') {
    return connection
  }
  const s = socket as Corkable
  const send = connection.send.bind(connection)
  let corked = false
  const uncork = (): void => {
    corked = false
    s.uncork()
  }
  connection.send = (data) => {
    if (!corked && s.destroyed !== true) {
      corked = true
      s.cork()
      uncorkAtTurnEnd(uncork)
    }
    return send(data)
  }
  return connection
}

/** Wrap an encrypter factory so that the TCP connections it secures write once per turn */
export function corkEncrypted<C> (factory: (components: C) => ConnectionEncrypter): (components: C) => ConnectionEncrypter {
  return (components: C) => {
    const inner = factory(components)
    const outbound = inner.secureOutbound.bind(inner)
    const inbound = inner.secureInbound.bind(inner)
    inner.secureOutbound = async (connection, options) => outbound(corkTurns(connection), options)
    inner.secureInbound = async (connection, options) => inbound(corkTurns(connection), options)
    return inner
  }
}
