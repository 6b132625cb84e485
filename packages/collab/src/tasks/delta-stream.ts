/**
 * The requester's reading of a 2.0.0 task stream (spec/collab-tasks.md
 * 14.2): full `status` / `artifact` events pass as they are; each `delta` is
 * applied to the snapshot rebuilt so far and passed on as the version 1
 * events it stands for (one `artifact` event per artifact added, a `status`
 * event for any other change), so the requester's public events are the same
 * on both versions.
 */
import { InvalidEnvelopeError } from '../errors.js'
import { isMap, parseEvent } from './wire.js'
import { applyDelta, parseDelta } from './wire-v2.js'
import type { TaskSnapshot } from './model.js'

/**
 * Read `source` (whose first result is `first`) to its end, rebuilding full
 * events from deltas. On a `submit` stream (`announceArtifacts`), artifacts
 * that first show in a full snapshot (added while the executor held the
 * stream's first event back, 14.1) are announced with an `artifact` event
 * each before it, as version 1 streams them
 */
export async function * decodeV2Stream (source: AsyncGenerator<unknown>, first: IteratorResult<unknown>, announceArtifacts = false): AsyncGenerator<unknown> {
  let current: TaskSnapshot | undefined
  /** artifacts the reader was told of */
  let told = 0
  try {
    let next = first
    while (next.done !== true) {
      const raw = next.value
      if (isMap(raw) && raw.type === 'delta') {
        if (current == null) throw new InvalidEnvelopeError('A task delta before the first snapshot')
        const delta = parseDelta(raw)
        current = applyDelta(current, delta)
        for (const artifact of delta.artifacts ?? []) yield { type: 'artifact', task: current, artifact }
        told = current.artifacts.length
        const other = delta.state != null || delta.messages != null || delta.dropped != null || 'result' in delta || delta.error != null
        if (other || delta.artifacts == null) yield { type: 'status', task: current }
      } else {
        const event = parseEvent(raw)
        if (event.type === 'status' || event.type === 'artifact') {
          current = event.task
          const unseen = event.type === 'status' && announceArtifacts ? current.artifacts.slice(told) : []
          for (const artifact of unseen) yield { type: 'artifact', task: current, artifact }
          told = current.artifacts.length
        }
        yield raw
      }
      next = await source.next()
    }
  } finally {
    await source.return(undefined)
  }
}
