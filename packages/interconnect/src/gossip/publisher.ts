/**
 * The publishing side of the gossip channel (spec `interconnect.md` 12.4):
 * when and what this node publishes on its domain topic.
 *
 * - on change of the announced set, debounced (hosting 20 agents makes one message);
 * - every `interval` (±10 % jitter) while it announces something;
 * - its first snapshots carry `hello` until one reached a peer; a `hello`
 *   heard from another peer is answered within 0-1 s, at most once per
 *   `helloMinInterval` (later hellos wait for the end of that interval);
 * - on stop, an empty snapshot (withdrawal) if it announced anything.
 */
import { raceSignal } from 'race-signal'
import { encodeSnapshot, SNAPSHOT_MAX_ADDRS, SNAPSHOT_VERSION } from './snapshot.js'
import type { GossipDefaults } from './options.js'
import type { CapabilitySnapshot } from './snapshot.js'
import type { PubSub } from '../components.js'
import type { Logger } from '@libp2p/interface'

export interface PublisherInit {
  pubsub: PubSub
  topic: string
  opts: GossipDefaults
  log: Logger
  /** The capabilities this node announces now */
  caps(): string[]
  /** The addresses this node lists (at most 16 are sent) */
  addrs(): string[]
}

/** How long the withdrawal on stop may take, ms */
const WITHDRAW_TIMEOUT = 2_000

export class GossipPublisher {
  private readonly init: PublisherInit
  private readonly log: Logger
  private seq = 0
  private helloPending = true
  private lastHelloAnswer = -Infinity
  /** The caps of the last snapshot published */
  private lastCaps: string[] = []
  private debounceTimer?: ReturnType<typeof setTimeout>
  private intervalTimer?: ReturnType<typeof setTimeout>
  private helloTimer?: ReturnType<typeof setTimeout>
  private running = false
  private publishing: Promise<void> = Promise.resolve()
  /** When the publisher started (a hello that announces nothing waits `helloHold` from then) */
  private startedAt = 0
  /** Ends the wait of a held hello (something to announce, or stop) */
  private releaseHello?: () => void
  /** Snapshots published since start */
  published = 0

  constructor (init: PublisherInit) {
    this.init = init
    this.log = init.log
  }

  start (): void {
    this.running = true
    this.helloPending = true
    this.startedAt = Date.now()
    this.scheduleInterval()
    this.changed()
  }

  /** The announced set changed (or a first peer subscribed): publish soon */
  changed (): void {
    if (!this.running) return
    // something to announce: a held hello goes out now, with it
    if (this.init.caps().length > 0) this.releaseHello?.()
    if (this.debounceTimer != null) return
    this.debounceTimer = setTimeout(() => {
      this.debounceTimer = undefined
      void this.publish('change')
    }, this.init.opts.debounce)
    this.debounceTimer.unref?.()
  }

  /** A peer subscribed to the topic: a hello not yet delivered goes out now */
  peerSubscribed (): void {
    if (this.helloPending) this.changed()
  }

  /**
   * Another peer said hello: republish within 0-1 s, at most once per
   * `helloMinInterval` (a hello heard sooner after the last answer is
   * answered when that interval ends, one answer for all of them)
   */
  heardHello (): void {
    if (!this.running || this.helloTimer != null) return
    if (this.init.caps().length === 0 && this.lastCaps.length === 0) return
    const now = Date.now()
    const at = Math.max(now, this.lastHelloAnswer + this.init.opts.helloMinInterval) + Math.floor(Math.random() * 1_000)
    this.lastHelloAnswer = at
    this.helloTimer = setTimeout(() => {
      this.helloTimer = undefined
      void this.publish('hello answer')
    }, at - now)
    this.helloTimer.unref?.()
  }

  async stop (): Promise<void> {
    if (!this.running) return
    this.running = false
    this.releaseHello?.()
    clearTimeout(this.debounceTimer)
    clearTimeout(this.intervalTimer)
    clearTimeout(this.helloTimer)
    this.debounceTimer = this.intervalTimer = this.helloTimer = undefined
    await this.publishing
    if (this.lastCaps.length > 0) {
      // withdraw: peers drop this node from their index at once, not after the ttl
      await this.send([], false, 'withdrawal', AbortSignal.timeout(WITHDRAW_TIMEOUT))
    }
  }

  private scheduleInterval (): void {
    const { interval } = this.init.opts
    this.intervalTimer = setTimeout(() => {
      this.scheduleInterval()
      if (this.init.caps().length > 0 || this.helloPending) void this.publish('interval')
    }, Math.round(interval * (0.9 + 0.2 * Math.random())))
    this.intervalTimer.unref?.()
  }

  /** Publish the current set (one publication at a time, in order) */
  private async publish (why: string): Promise<void> {
    const next = this.publishing.then(async () => {
      if (!this.running) return
      // a hello that announces nothing only asks for the others' snapshots:
      // the node's first lookups ask the index query for what they need meanwhile
      if (this.helloPending && this.init.caps().length === 0) {
        await this.holdHello()
        if (!this.running) return
      }
      const caps = this.init.caps()
      // an empty set that was empty already, its hello delivered, tells no one anything
      if (caps.length === 0 && this.lastCaps.length === 0 && !this.helloPending) return
      await this.send(this.fit(caps), this.helloPending, why)
    })
    this.publishing = next
    await next
  }

  /** Wait until `helloHold` has passed since start, something is to be announced, or stop */
  private async holdHello (): Promise<void> {
    const left = this.startedAt + this.init.opts.helloHold - Date.now()
    if (left <= 0) return
    await new Promise<void>(resolve => {
      const done = (): void => {
        clearTimeout(timer)
        if (this.releaseHello === done) this.releaseHello = undefined
        resolve()
      }
      const timer = setTimeout(done, left)
      timer.unref?.()
      this.releaseHello = done
    })
  }

  /** The first of `caps` that fit the bounds of one snapshot */
  private fit (caps: string[]): string[] {
    const { maxCapabilities, maxMessageBytes } = this.init.opts
    let fitting = caps.length > maxCapabilities ? caps.slice(0, maxCapabilities) : caps
    while (fitting.length > 0 && this.encode(fitting, true).byteLength > maxMessageBytes) {
      fitting = fitting.slice(0, Math.floor(fitting.length * 0.9))
    }
    if (fitting.length < caps.length) {
      this.log.error('announcing %d of %d capabilities over gossip: a snapshot holds at most %d capabilities and %d bytes', fitting.length, caps.length, maxCapabilities, maxMessageBytes)
    }
    return fitting
  }

  private encode (caps: string[], hello: boolean): Uint8Array {
    return encodeSnapshot(this.snapshot(caps, hello, Math.max(this.seq + 1, Date.now())))
  }

  private snapshot (caps: string[], hello: boolean, seq: number): CapabilitySnapshot {
    // a withdrawal lists no addresses: nothing is to be fetched from it
    const addrs = caps.length > 0 ? this.init.addrs().slice(0, SNAPSHOT_MAX_ADDRS) : []
    return { v: SNAPSHOT_VERSION, seq, ttl: this.init.opts.ttl, caps, ...(hello ? { hello: true as const } : {}), ...(addrs.length > 0 ? { addrs } : {}) }
  }

  private async send (caps: string[], hello: boolean, why: string, signal?: AbortSignal): Promise<void> {
    this.seq = Math.max(this.seq + 1, Date.now())
    const snapshot = this.snapshot(caps, hello, this.seq)
    try {
      const publishing = this.init.pubsub.publish(this.init.topic, encodeSnapshot(snapshot))
      const { recipients } = signal == null ? await publishing : await raceSignal(publishing, signal)
      this.lastCaps = caps
      this.published++
      if (hello && recipients.length > 0) this.helloPending = false
      this.log.trace('published %d capabilities (%s, seq %d%s) to %d peers', caps.length, why, snapshot.seq, hello ? ', hello' : '', recipients.length)
    } catch (err: any) {
      // the next change or interval publishes again
      this.log('could not publish the %s snapshot on %s: %s', why, this.init.topic, err?.message ?? err)
    }
  }
}

