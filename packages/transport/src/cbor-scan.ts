/**
 * A pass over a frame body before it is decoded (`spec/transport.md`
 * section 5): it walks the CBOR heads without building any value, so a body
 * that is too big in items or nesting, or not canonical DAG-CBOR, is refused
 * before the decoder allocates anything for it. It checks what the DAG-CBOR
 * decoder lets through:
 *
 * - floats only as 64-bit (`0xfb`); no float16 or float32,
 * - simple values only `false`, `true`, `null` (no `undefined`, no others),
 * - map keys are text strings in canonical order (encoded length first,
 *   then bytewise), each at most once,
 * - floats as values of envelope fields other than `p` are reported (the
 *   caller refuses them once it has read the frame id),
 * - a float inside `p` whose value is a safe integer (or -0) is reported:
 *   the decoder reads it as a number that DAG-CBOR encodes as an integer,
 *   so the payload is not in canonical form (protocols that need its bytes
 *   to be canonical refuse it),
 * - at most `maxItems` data items and `maxDepth` levels of nesting.
 *
 * Indefinite lengths, reserved heads, truncation and trailing bytes are
 * refused here too; shortest-form integers, tags and CIDs are left to the
 * decoder, which checks them.
 */
import { MalformedFrameError } from './errors.js'

export interface ScanLimits {
  /** Most data items in one body (every scalar, string, array, map and tag counts one) */
  maxItems: number
  /** Most levels of arrays, maps and tags inside one another */
  maxDepth: number
}

/** The CID tag, the only tag DAG-CBOR allows */
const TAG_CID = 42

/** `p`, the envelope key whose value may be anything */
const PAYLOAD_KEY_0 = 0x61
const PAYLOAD_KEY_1 = 0x70
/** `i`, the request id */
const ID_KEY_1 = 0x69

/** Rules whose violation leaves the rest of the body readable: refused for the call only, once its id is known */
const CALL_SCOPE = Symbol('call scope')

function fail (message: string, callScope = false): never {
  const err = new MalformedFrameError(`Frame is not canonical DAG-CBOR: ${message}`)
  if (callScope) (err as unknown as Record<symbol, boolean>)[CALL_SCOPE] = true
  throw err
}

/** Length-first, then bytewise comparison of two encoded keys */
function compareKeys (buf: Uint8Array, aStart: number, aEnd: number, bStart: number, bEnd: number): number {
  const la = aEnd - aStart
  const lb = bEnd - bStart
  if (la !== lb) return la - lb
  for (let i = 0; i < la; i++) {
    const d = buf[aStart + i] - buf[bStart + i]
    if (d !== 0) return d
  }
  return 0
}

/** What the scan found that only the envelope rules can judge */
export interface ScanResult {
  /** Data items in the body */
  items: number
  /** The first top-level map key other than `p` whose value is a float */
  floatField?: string
  /** A float inside `p` holds a safe integer or -0 (DAG-CBOR encodes that number as an integer) */
  integralFloat?: true
}

const utf8 = new TextDecoder()

/** The text of an encoded text-string key */
function keyText (buf: Uint8Array, start: number, end: number): string {
  const info = buf[start] & 0x1f
  const headLen = info < 24 ? 1 : info === 24 ? 2 : info === 25 ? 3 : info === 26 ? 5 : 9
  return utf8.decode(buf.subarray(start + headLen, end))
}

/**
 * Check a frame body; throws `MalformedFrameError` when it breaks a rule.
 * When the envelope's `i` (which sorts before `m`, `n`, `p` and `t`) was
 * read as an integer above 0 before the problem, the error carries it as
 * `frameId`, so that only that call is refused.
 */
export function scanBody (buf: Uint8Array, limits: ScanLimits): ScanResult {
  const seen = { id: 0 }
  try {
    return walk(buf, limits, seen)
  } catch (err: any) {
    if (seen.id > 0 && err instanceof MalformedFrameError && (err as unknown as Record<symbol, boolean>)[CALL_SCOPE]) {
      ;(err as MalformedFrameError & { frameId?: number }).frameId = seen.id
    }
    throw err
  }
}

function walk (buf: Uint8Array, limits: ScanLimits, seen: { id: number }): ScanResult {
  const len = buf.length
  // open containers, innermost last: items still to read, whether it is a map,
  // and for maps where the previous key starts and ends
  const remaining: number[] = []
  const isMap: boolean[] = []
  const total: number[] = []
  const prevKeyStart: number[] = []
  const prevKeyEnd: number[] = []
  let pos = 0
  let items = 0
  /** in the top-level map, the value being read is not `p` */
  let envelopeValue = false
  let floatKey = -1
  let integralFloat = false
  let floatKeyEnd = -1
  let keyStart = -1
  /** in the top-level map, the value being read is `i` */
  let idValue = false

  while (true) {
    if (pos >= len) fail('truncated')
    if (++items > limits.maxItems) fail(`more than ${limits.maxItems} items`, true)

    const depth = remaining.length
    const top = depth - 1
    const isKey = depth > 0 && isMap[top] && (total[top] - remaining[top]) % 2 === 0

    const b = buf[pos]
    const major = b >> 5
    const info = b & 0x1f
    let arg: number
    let headLen: number
    if (info < 24) {
      arg = info
      headLen = 1
    } else if (info === 24) {
      if (pos + 2 > len) fail('truncated')
      arg = buf[pos + 1]
      headLen = 2
    } else if (info === 25) {
      if (pos + 3 > len) fail('truncated')
      arg = (buf[pos + 1] << 8) | buf[pos + 2]
      headLen = 3
    } else if (info === 26) {
      if (pos + 5 > len) fail('truncated')
      arg = ((buf[pos + 1] << 24) >>> 0) + ((buf[pos + 2] << 16) | (buf[pos + 3] << 8) | buf[pos + 4])
      headLen = 5
    } else if (info === 27) {
      if (pos + 9 > len) fail('truncated')
      const hi = ((buf[pos + 1] << 24) >>> 0) + ((buf[pos + 2] << 16) | (buf[pos + 3] << 8) | buf[pos + 4])
      const lo = ((buf[pos + 5] << 24) >>> 0) + ((buf[pos + 6] << 16) | (buf[pos + 7] << 8) | buf[pos + 8])
      arg = hi * 0x100000000 + lo
      headLen = 9
    } else if (info === 31) {
      return fail('indefinite length')
    } else {
      return fail(`reserved additional information ${info}`)
    }

    if (isKey && major !== 3) fail('map key is not a text string')

    let end = pos + headLen
    let opens = 0
    switch (major) {
      case 0:
        if (depth === 1 && !isKey && idValue && arg <= Number.MAX_SAFE_INTEGER) seen.id = arg
        break
      case 1:
        break
      case 2:
      case 3:
        if (arg > len - end) fail('truncated')
        end += arg
        break
      case 4:
        opens = arg
        break
      case 5:
        if (arg > Number.MAX_SAFE_INTEGER / 2) fail('map too large')
        opens = arg * 2
        break
      case 6:
        if (arg !== TAG_CID) fail(`tag ${arg}`)
        opens = 1
        break
      default:
        // major type 7: simple values and floats
        if (info === 27) {
          if (envelopeValue && depth === 1 && floatKey < 0) {
            floatKey = keyStart
            floatKeyEnd = prevKeyEnd[top]
          } else if (!envelopeValue && !integralFloat && end - pos === 9) {
            const v = new DataView(buf.buffer, buf.byteOffset + pos + 1, 8).getFloat64(0)
            if (Number.isSafeInteger(v)) integralFloat = true
          }
        } else if (info === 25 || info === 26) {
          fail(`float of ${info === 25 ? 16 : 32} bits`, true)
        } else if (info === 23) {
          fail('undefined', true)
        } else if (info !== 20 && info !== 21 && info !== 22) {
          fail(`simple value ${info < 24 ? info : arg}`, true)
        }
        break
    }

    if (isKey) {
      if (prevKeyEnd[top] >= 0) {
        const order = compareKeys(buf, prevKeyStart[top], prevKeyEnd[top], pos, end)
        if (order === 0) fail('repeated map key')
        if (order > 0) fail('map keys out of order', true)
      }
      prevKeyStart[top] = pos
      prevKeyEnd[top] = end
      if (depth === 1) {
        keyStart = pos
        idValue = end - pos === 2 && buf[pos] === PAYLOAD_KEY_0 && buf[pos + 1] === ID_KEY_1
        envelopeValue = !(end - pos === 2 && buf[pos] === PAYLOAD_KEY_0 && buf[pos + 1] === PAYLOAD_KEY_1)
      }
    }

    pos = end

    if (opens > 0) {
      if (opens > len - pos) fail('truncated')
      if (depth >= limits.maxDepth) fail(`nested deeper than ${limits.maxDepth}`, true)
      remaining.push(opens)
      total.push(opens)
      isMap.push(major === 5)
      prevKeyStart.push(-1)
      prevKeyEnd.push(-1)
      continue
    }

    // one item is complete: close every container it completes
    while (true) {
      const d = remaining.length
      if (d === 0) {
        if (pos !== len) fail('bytes after the item')
        const found: ScanResult = floatKey < 0 ? { items } : { items, floatField: keyText(buf, floatKey, floatKeyEnd) }
        if (integralFloat) found.integralFloat = true
        return found
      }
      if (--remaining[d - 1] > 0) break
      remaining.pop()
      total.pop()
      isMap.pop()
      prevKeyStart.pop()
      prevKeyEnd.pop()
    }
  }
}
