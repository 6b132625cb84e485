/**
 * The requester's reading of a 2.0.0 task stream (spec/collab-tasks.md
 * 14.2): full `status` / `artifact` events pass as they are; each `delta` is
 * applied to the snapshot rebuilt so far and passed on as the version 1
 * events it stands for (one `artifact` event per artifact added, a `status`
 * event for any other change), so the requester's public events are the same
 * on both versions. A decoder per stream, called per item (no generator of
 * its own: the stream's reader, `event-source.ts`, calls it).
 */
import { InvalidEnvelopeError } from '../errors.js'
import { isMap, parseEvent } from './wire.js'
import { applyDelta, parseDelta } from './wire-v2.js'
import type { TaskSnapshot } from './model.js'

export class V2EventDecoder {
  private current: TaskSnapshot | undefined
  /** artifacts the reader was told of */
  private told = 0
  private readonly announceArtifacts: boolean

  /**
   * On a `submit` stream (`announceArtifacts`), artifacts that first show in
   * a full snapshot (added while the executor held the stream's first event
   * back, 14.1) are announced with an `artifact` event each before it, as
   * version 1 streams them
   */
  constructor (announceArtifacts = false) {
    this.announceArtifacts = announceArtifacts
  }

  /** The events one item of the stream stands for, in order */
  decode (raw: unknown): unknown[] {
    if (isMap(raw) && raw.type === 'delta') {
      if (this.current == null) throw new InvalidEnvelopeError('A task delta before the first snapshot')
      const delta = parseDelta(raw)
      const current = applyDelta(this.current, delta)
      this.current = current
      const out: unknown[] = []
      for (const artifact of delta.artifacts ?? []) out.push({ type: 'artifact', task: current, artifact })
      this.told = current.artifacts.length
      const other = delta.state != null || delta.messages != null || delta.dropped != null || 'result' in delta || delta.error != null
      if (other || delta.artifacts == null) out.push({ type: 'status', task: current })
      return out
    }
    const event = parseEvent(raw)
    if (event.type !== 'status' && event.type !== 'artifact') return [raw]
    const current = event.task
    this.current = current
    const unseen = event.type === 'status' && this.announceArtifacts ? current.artifacts.slice(this.told) : []
    this.told = current.artifacts.length
    if (unseen.length === 0) return [raw]
    return [...unseen.map(artifact => ({ type: 'artifact', task: current, artifact })), raw]
  }
}
