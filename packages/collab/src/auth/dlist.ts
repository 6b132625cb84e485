/**
 * An intrusive doubly linked list: O(1) append, removal of any member and
 * access to the oldest, with no tombstones (unlike deleting from the front
 * of a `Map` or `Set` and asking for its first key, which skips every slot
 * deleted since the table was last rehashed).
 */

/** The links an item keeps for one list it belongs to */
export interface Links<T> {
  prev: T | undefined
  next: T | undefined
}

export function links<T> (): Links<T> {
  return { prev: undefined, next: undefined }
}

export class DList<T> {
  first: T | undefined
  last: T | undefined
  size = 0
  private readonly of: (item: T) => Links<T>

  /** `of(item)`: the item's links for this list */
  constructor (of: (item: T) => Links<T>) {
    this.of = of
  }

  /** Append an item that is in no list of this kind */
  push (item: T): void {
    const l = this.of(item)
    l.prev = this.last
    l.next = undefined
    if (this.last != null) this.of(this.last).next = item
    else this.first = item
    this.last = item
    this.size++
  }

  /** Remove a member of this list */
  remove (item: T): void {
    const l = this.of(item)
    if (l.prev != null) this.of(l.prev).next = l.next
    else this.first = l.next
    if (l.next != null) this.of(l.next).prev = l.prev
    else this.last = l.prev
    l.prev = undefined
    l.next = undefined
    this.size--
  }

  clear (): void {
    this.first = undefined
    this.last = undefined
    this.size = 0
  }
}
