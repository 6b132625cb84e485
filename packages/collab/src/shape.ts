/**
 * Shape checks shared by the wire codecs of the layer
 */

/** A plain map (not null, an array or bytes), as DAG-CBOR decodes one */
export function isMap (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Uint8Array)
}

/**
 * A plain object (its prototype is `Object.prototype` or null): what DAG-CBOR
 * decodes a map to and what a caller writes as a literal; the strict check of
 * signed records (tokens, revocations), which refuses class instances
 */
export function isPlainMap (value: unknown): value is Record<string, unknown> {
  if (value == null || typeof value !== 'object' || Array.isArray(value)) return false
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/** Own keys whose value is not `undefined` (DAG-CBOR has no undefined) */
export function definedKeys (map: Record<string, unknown>): string[] {
  return Object.keys(map).filter(k => map[k] !== undefined)
}

/** Refuse a map with a defined key outside `allowed`: `fail` makes the error, naming `what` and the first few such keys */
export function onlyKeys (map: Record<string, unknown>, allowed: readonly string[], what: string, fail: (message: string) => Error): void {
  const extra = definedKeys(map).filter(k => !allowed.includes(k))
  if (extra.length > 0) throw fail(`Unknown fields in ${what}: ${extra.slice(0, 5).join(', ')}`)
}
