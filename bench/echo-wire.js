/**
 * The echo ends the benchmarks share (bench/index.js `echo` group in one
 * process, bench/task-paths.js across two): a bare long-lived libp2p stream with
 * `lpStream` framing or read through its 'message' events, and a plain
 * `node:net` socket with the same varint length-prefixed framing. Every
 * client is ordered: the answer to a call is the next frame read.
 */
import net from 'node:net'
import { once } from 'node:events'
import { lpStream } from '@libp2p/utils'

export const ECHO_PROTOCOL = '/bench/echo/1.0.0'
const MAX_FRAME = 1_048_576

function deferred () {
  let resolve
  let reject
  const promise = new Promise((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/** Echo every length-prefixed frame of an inbound libp2p stream, in order */
export function serveLpEcho (stream) {
  const lp = lpStream(stream, { maxDataLength: MAX_FRAME })
  ;(async () => {
    try {
      while (true) {
        await lp.write(await lp.read())
      }
    } catch {
      // the client closed its side (EOF) or the node is stopping
    }
    try {
      await stream.close({ signal: AbortSignal.timeout(1_000) })
    } catch (err) {
      stream.abort(err)
    }
  })()
}

/**
 * A client of an ordered echo: every call writes one frame and is answered by
 * the next frame read (responses come back in request order)
 */
function orderedClient (write) {
  const waiting = []
  let head = 0
  let failure
  const fail = (err) => {
    failure ??= err
    for (let i = head; i < waiting.length; i++) {
      waiting[i]?.reject(failure)
    }
    waiting.length = 0
    head = 0
  }
  const answer = (bytes) => {
    const d = waiting[head]
    if (d == null) {
      fail(new Error('Echo answered a frame nobody sent'))
      return
    }
    waiting[head++] = undefined
    if (head > 1024 && head * 2 > waiting.length) {
      waiting.splice(0, head)
      head = 0
    }
    d.resolve(bytes)
  }
  const call = (payload) => {
    if (failure != null) {
      return Promise.reject(failure)
    }
    const d = deferred()
    waiting.push(d)
    write(payload).catch(fail)
    return d.promise
  }
  return { call, answer, fail }
}

function encodeVarint (n) {
  const out = []
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80)
    n = Math.floor(n / 128)
  }
  out.push(n)
  return out
}


/** `varint length || payload` as one buffer */
function frame (payload) {
  const prefix = encodeVarint(payload.byteLength)
  const buf = Buffer.allocUnsafe(prefix.length + payload.byteLength)
  for (let i = 0; i < prefix.length; i++) buf[i] = prefix[i]
  buf.set(payload, prefix.length)
  return buf
}


/**
 * A decoder of varint-length-prefixed frames from socket chunks; calls
 * `onFrame(body)` for every complete frame
 */
function frameDecoder (onFrame) {
  let pending = null
  return (chunk) => {
    const buf = pending == null ? chunk : Buffer.concat([pending, chunk])
    let offset = 0
    while (offset < buf.length) {
      let length = 0
      let shift = 0
      let i = offset
      let complete = false
      while (i < buf.length) {
        const b = buf[i++]
        length += (b & 0x7f) * 2 ** shift
        shift += 7
        if (b < 0x80) {
          complete = true
          break
        }
        if (shift > 28) {
          throw new Error('Frame length prefix too long')
        }
      }
      if (!complete || buf.length - i < length) {
        break
      }
      if (length > MAX_FRAME) {
        throw new Error(`Frame of ${length} bytes is too large`)
      }
      onFrame(buf.subarray(i, i + length))
      offset = i + length
    }
    pending = offset < buf.length ? buf.subarray(offset) : null
  }
}
/** Close a libp2p stream gracefully within `ms`, else abort it */
async function closeStream (stream, ms) {
  try {
    await stream.close({ signal: AbortSignal.timeout(ms) })
  } catch (err) {
    stream.abort(err)
  }
}

/** The client end of `serveLpEcho` on an outbound `stream`: `{ call(payload), close() }` */
export function lpEchoClient (stream) {
  const lp = lpStream(stream, { maxDataLength: MAX_FRAME })
  let closing = false
  const echo = orderedClient((payload) => lp.write(payload))
  const reader = (async () => {
    try {
      while (true) {
        echo.answer(await lp.read())
      }
    } catch (err) {
      echo.fail(closing ? new Error('closed') : err)
    }
  })()
  return {
    call: (payload) => echo.call(payload),
    close: async () => {
      closing = true
      await closeStream(stream, 2_000)
      await reader
    }
  }
}

/**
 * Read a libp2p stream's 'message' events directly (no async iterator, no
 * lpStream) and feed their bytes to a frame decoder calling `onFrame(body)`
 */
function onStreamFrames (stream, onFrame) {
  const decode = frameDecoder(onFrame)
  stream.addEventListener('message', (evt) => {
    try {
      decode(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray())
    } catch (err) {
      stream.abort(err)
    }
  })
}

/** Echo every frame of an inbound libp2p stream from its 'message' events, written with `send` */
export function serveEventsEcho (stream) {
  onStreamFrames(stream, (body) => { stream.send(frame(body)) })
  stream.addEventListener('remoteCloseWrite', () => { closeStream(stream, 1_000).catch(() => {}) })
}

/** The client end of `serveEventsEcho` on an outbound `stream`: `{ call(payload), close() }` */
export function eventsEchoClient (stream) {
  const echo = orderedClient(async (payload) => { stream.send(frame(payload)) })
  onStreamFrames(stream, (body) => { echo.answer(body) })
  stream.addEventListener('close', (evt) => { echo.fail(evt.error ?? new Error('closed')) })
  return {
    call: (payload) => echo.call(payload),
    close: () => closeStream(stream, 2_000)
  }
}

/** A `node:net` echo server of varint-framed messages on 127.0.0.1: `{ port, close() }` */
export async function startNetEchoServer () {
  const sockets = new Set()
  const server = net.createServer((socket) => {
    sockets.add(socket)
    socket.setNoDelay(true)
    socket.on('close', () => { sockets.delete(socket) })
    socket.on('error', () => {})
    socket.on('data', frameDecoder((body) => { socket.write(frame(body)) }))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    port: server.address().port,
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise(resolve => { server.close(() => { resolve() }) })
    }
  }
}

/** A client of `startNetEchoServer` on `port`: `{ call(payload), close() }` */
export async function netEchoClient (port) {
  const socket = net.connect({ host: '127.0.0.1', port })
  socket.setNoDelay(true)
  await once(socket, 'connect')
  const echo = orderedClient(async (payload) => { socket.write(frame(payload)) })
  socket.on('data', frameDecoder((body) => { echo.answer(body) }))
  socket.on('error', (err) => { echo.fail(err) })
  socket.on('close', () => { echo.fail(new Error('closed')) })
  return {
    call: (payload) => echo.call(payload),
    close: async () => {
      const closed = once(socket, 'close')
      socket.end()
      await closed
    }
  }
}
