/**
 * Checking the numeric options of an `XInit` once resolved against their
 * defaults (`init.x ?? DEFAULT`): one rule for every component of the layer.
 * A bad value is a `RangeError` naming the option, thrown when the component
 * is created.
 */

export interface NumberRange {
  /** Smallest value accepted @default 1 */
  min?: number
  /** Largest value accepted @default Number.MAX_SAFE_INTEGER */
  max?: number
  /** Only integers @default false */
  integer?: boolean
}

/** `value` when it is a finite number in the range, else a RangeError naming `name` */
export function numberOption (name: string, value: number, range: NumberRange = {}): number {
  const min = range.min ?? 1
  const max = range.max ?? Number.MAX_SAFE_INTEGER
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max || (range.integer === true && !Number.isInteger(value))) {
    throw new RangeError(`${name} must be ${range.integer === true ? 'an integer' : 'a number'} in ${min}..${max}, not ${String(value)}`)
  }
  return value
}

/** A count: `value` when it is a positive safe integer, else a RangeError naming `name` */
export function positiveInteger (name: string, value: number): number {
  return numberOption(name, value, { integer: true })
}
