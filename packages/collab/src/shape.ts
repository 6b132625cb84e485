/**
 * Shape checks shared by the wire codecs of the layer
 */

/** A plain map (not null, an array or bytes), as DAG-CBOR decodes one */
export function isMap (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Uint8Array)
}
