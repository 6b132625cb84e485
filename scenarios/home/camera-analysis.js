// Frame analysis of the home's cameras, from the frame metadata shipped in
// data/frames.json (what the robots' on-board detector recorded). Pure and
// deterministic: the same frame always gets the same verdict. Served to agents
// by the camera MCP server (camera-mcp-server.js).
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

/** A frame id: `<camera prefix>-<6 digits>` */
export const FRAME_ID = /^[a-z0-9]{1,8}-[0-9]{6}$/
/** A camera id */
export const CAMERA_ID = /^[a-z0-9-]{1,32}$/
/** Detector score (confidence × image quality) at or above which a person is an intruder @default */
export const INTRUDER_THRESHOLD = 0.8
/** Lowest score a detection needs to count at all */
export const MIN_SCORE = 0.5
/** Most frames and detections per frame read from the metadata file */
const MAX_FRAMES = 10_000
const MAX_DETECTIONS = 64

const CLASSES = {
  person: 'person',
  fox: 'animal',
  cat: 'animal',
  dog: 'animal',
  deer: 'animal',
  badger: 'animal',
  vehicle: 'object',
  drone: 'object'
}

/** A frame id or camera that the metadata does not know */
export class UnknownFrameError extends Error {
  static name = 'UnknownFrameError'
  code = 'UNKNOWN_FRAME'
  constructor (message) {
    super(message)
    this.name = UnknownFrameError.name
  }
}

/** The frame metadata file is malformed */
export class FrameDataError extends Error {
  static name = 'FrameDataError'
  code = 'INVALID_FRAME_DATA'
  constructor (message) {
    super(message)
    this.name = FrameDataError.name
  }
}

const DEFAULT_FILE = fileURLToPath(new URL('./data/frames.json', import.meta.url))

/**
 * Read and check the frame metadata `{ cameras, frames }`. Throws
 * `FrameDataError` naming the bad entry.
 */
export function loadFrames (file = DEFAULT_FILE) {
  let data
  try {
    data = JSON.parse(readFileSync(file, 'utf8'))
  } catch (err) {
    throw new FrameDataError(`Cannot read frame metadata ${file}: ${err?.message ?? err}`)
  }
  const isMap = v => v != null && typeof v === 'object' && !Array.isArray(v)
  if (!isMap(data?.cameras) || !isMap(data?.frames)) throw new FrameDataError('frames.json needs "cameras" and "frames" maps')
  const ids = Object.keys(data.frames)
  if (ids.length > MAX_FRAMES) throw new FrameDataError(`More than ${MAX_FRAMES} frames`)
  for (const id of ids) {
    const f = data.frames[id]
    const bad = what => new FrameDataError(`Frame ${id}: ${what}`)
    if (!FRAME_ID.test(id)) throw bad('not a frame id')
    if (!isMap(f)) throw bad('not an object')
    if (!isMap(data.cameras[f.camera])) throw bad(`unknown camera ${f.camera}`)
    if (typeof f.sharpness !== 'number' || f.sharpness < 0 || f.sharpness > 1) throw bad('sharpness must be 0-1')
    if (typeof f.lux !== 'number' || f.lux < 0) throw bad('lux must be a non-negative number')
    if (!Array.isArray(f.detections) || f.detections.length > MAX_DETECTIONS) throw bad(`detections must be a list of at most ${MAX_DETECTIONS}`)
    for (const d of f.detections) {
      if (typeof d?.label !== 'string' || typeof d.confidence !== 'number' || d.confidence < 0 || d.confidence > 1) throw bad('a detection needs a label and a confidence 0-1')
    }
  }
  return data
}

const round = v => Math.round(v * 1000) / 1000

/**
 * Image quality factor in [0.42, 1]: sharpness counts for 30 %; a frame
 * taken in the dark without infrared loses 40 % more.
 */
export function frameQuality (frame) {
  let q = 0.7 + 0.3 * frame.sharpness
  if (frame.ir !== true && frame.lux < 2) q *= 0.6
  return round(q)
}

/**
 * Analyse one frame: every detection is scored (detector confidence × frame
 * quality) and classed (person, animal, object); the verdict is the class of
 * the best-scoring person or animal at or above MIN_SCORE, else `clear`. A
 * person scoring at least `threshold` is an intruder.
 */
export function analyzeFrame (data, frameId, { threshold = INTRUDER_THRESHOLD } = {}) {
  if (typeof frameId !== 'string' || !FRAME_ID.test(frameId)) throw new UnknownFrameError(`Not a frame id: ${String(frameId).slice(0, 40)}`)
  const frame = Object.hasOwn(data.frames, frameId) ? data.frames[frameId] : undefined
  if (frame == null) throw new UnknownFrameError(`No frame ${frameId}`)
  if (typeof threshold !== 'number' || !(threshold > 0 && threshold <= 1)) throw new RangeError('threshold must be in (0, 1]')
  const quality = frameQuality(frame)
  const detections = frame.detections
    .map(d => ({ label: d.label, class: CLASSES[d.label] ?? 'object', score: round(d.confidence * quality) }))
    .sort((a, b) => b.score - a.score || a.label.localeCompare(b.label))
  const living = detections.filter(d => (d.class === 'person' || d.class === 'animal') && d.score >= MIN_SCORE)
  const best = living[0]
  const person = detections.find(d => d.class === 'person')
  const intruder = person != null && person.score >= threshold
  const verdict = best?.class ?? 'clear'
  const reason = intruder
    ? `person detected, score ${person.score} ≥ ${threshold}`
    : best != null
      ? `${best.label} detected (score ${best.score}); ${person != null ? `person score ${person.score} < ${threshold}` : 'no person'}`
      : detections.length > 0
        ? `no person or animal scoring ${MIN_SCORE} or more (in view: ${detections.map(d => `${d.label} ${d.score}`).join(', ')})`
        : 'nothing in view'
  return {
    frameId,
    camera: frame.camera,
    capturedAt: frame.capturedAt,
    quality,
    verdict,
    label: best?.label ?? null,
    confidence: best?.score ?? 0,
    intruder,
    threshold,
    reason,
    detections
  }
}

/** Status of one camera: online, model, and its latest frame */
export function cameraStatus (data, camera) {
  if (typeof camera !== 'string' || !CAMERA_ID.test(camera) || !Object.hasOwn(data.cameras, camera)) {
    throw new UnknownFrameError(`No camera ${String(camera).slice(0, 40)}`)
  }
  const frames = Object.entries(data.frames).filter(([, f]) => f.camera === camera)
  const latest = frames.sort((a, b) => String(b[1].capturedAt).localeCompare(String(a[1].capturedAt)))[0]
  const c = data.cameras[camera]
  return {
    camera,
    online: true,
    robot: c.robot ?? null,
    model: c.model ?? null,
    ir: c.ir === true,
    resolution: Array.isArray(c.resolution) ? c.resolution : null,
    frames: frames.length,
    latestFrame: latest?.[0] ?? null,
    latestAt: latest?.[1].capturedAt ?? null
  }
}
