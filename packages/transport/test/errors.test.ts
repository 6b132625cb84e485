import { describe, expect, it } from 'vitest'
import { CodedError, ErrorFamily } from '../src/index.js'

class ShopError extends CodedError {
  static override name = 'ShopError'
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
})
