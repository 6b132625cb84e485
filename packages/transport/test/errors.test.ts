import { describe, expect, it } from 'vitest'
import { CodedError, ErrorFamily, MessagingError, RemoteError, TimeoutError, errorFromWire, withCode } from '../src/index.js'

class ShopError extends CodedError {
  static override name = 'ShopError'
}

/** A class written out on the shared constructor */
class SoldOutError extends withCode(ShopError, 'SOLD_OUT', 'Sold out') {
  static override name = 'SoldOutError'
}

describe('CodedError and ErrorFamily', () => {
  it('names instances after the subclass and keeps the code', () => {
    const err = new ShopError('OUT_OF_STOCK', 'No more apples', { cause: 'x' })
    expect(err).toBeInstanceOf(Error)
    expect(err.name).toBe('ShopError')
    expect(err.code).toBe('OUT_OF_STOCK')
    expect(err.message).toBe('No more apples')
    expect(err.cause).toBe('x')
  })

  it('defines named classes per code on such a base and rebuilds remote errors as them', () => {
    const family = new ErrorFamily<ShopError>(ShopError)
    const OutOfStock = family.define('OutOfStockError', 'OUT_OF_STOCK', 'Out of stock')
    const local = new OutOfStock()
    expect(local).toBeInstanceOf(ShopError)
    expect(local.name).toBe('OutOfStockError')
    expect(local.code).toBe('OUT_OF_STOCK')
    expect(local.message).toBe('Out of stock')
    const remote = family.fromRemote(Object.assign(new Error('gone'), { code: 'OUT_OF_STOCK', remote: true })) as ShopError & { remote: boolean }
    expect(remote.name).toBe('OutOfStockError')
    expect(remote.remote).toBe(true)
    const other = new Error('other')
    expect(family.fromRemote(Object.assign(other, { code: 'ELSE', remote: true }))).toBe(other)
    expect(() => family.define('Again', 'OUT_OF_STOCK', 'dup')).toThrow()
  })

  it('withCode: a written-out class gets the code, the default message and its own name', () => {
    const err = new SoldOutError()
    expect(err).toBeInstanceOf(ShopError)
    expect(err).toBeInstanceOf(SoldOutError)
    expect([err.name, err.code, err.message, SoldOutError.code]).toEqual(['SoldOutError', 'SOLD_OUT', 'Sold out', 'SOLD_OUT'])
    const cause = new Error('below')
    const other = new SoldOutError('None left', { cause })
    expect([other.message, other.cause]).toEqual(['None left', cause])
    expect(String(other)).toBe('SoldOutError: None left')
  })

  it('register: a family of written-out classes rebuilds remote errors as them, and refuses a code twice', () => {
    const family = new ErrorFamily<ShopError>(ShopError).register(SoldOutError)
    const remote = family.fromRemote(Object.assign(new Error('gone'), { code: 'SOLD_OUT', remote: true })) as SoldOutError & { remote: boolean }
    expect(remote).toBeInstanceOf(SoldOutError)
    expect([remote.name, remote.message, remote.remote]).toEqual(['SoldOutError', 'gone', true])
    expect(() => family.register(SoldOutError)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }))
  })

  it('the transport\'s own classes keep their names, codes and messages', () => {
    const t = new TimeoutError()
    expect([t.name, t.code, t.message, t.remote, t instanceof MessagingError]).toEqual(['TimeoutError', 'TIMEOUT', 'Timed out', false, true])
    const r = new RemoteError('MY_CODE', 'mine')
    expect([r.name, r.code, r.message]).toEqual(['RemoteError', 'MY_CODE', 'mine'])
    const w = errorFromWire('TIMEOUT', 'slow')
    expect(w).toBeInstanceOf(TimeoutError)
    expect([w.name, w.message, w.remote]).toEqual(['TimeoutError', 'slow', true])
    expect(new MessagingError('X', 'y').name).toBe('MessagingError')
  })
})
