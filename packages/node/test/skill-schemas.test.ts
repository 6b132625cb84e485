/**
 * The skills' input schemas describe the input their handlers really need
 * (issue 11 item 18): the car scenario's hotel configs against the hotel
 * module. The input the car's plan sends is accepted, and the module books a
 * room with it; inputs the handler cannot use (no city to look in, a number
 * of nights that is not one) are refused by the schema, where before the
 * handler failed on them.
 */
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'

const CAR = new URL('../../../scenarios/car/', import.meta.url)
const HOTELS = ['riviera-hotel.json', 'alpine.json', 'budget-inns.json']

const readJson = (name: string): any => JSON.parse(readFileSync(fileURLToPath(new URL(name, CAR)), 'utf8'))

/** The `travel.hotel.book` skill of a hotel node config, with its agent's module options */
function hotelSkill (file: string): { inputSchema: Record<string, unknown>, options: Record<string, unknown> } {
  const agent = readJson(file).agents.find((a: any) => a.skills.some((s: any) => s.id === 'travel.hotel.book'))
  return { inputSchema: agent.skills.find((s: any) => s.id === 'travel.hotel.book').inputSchema, options: agent.options }
}

/** What the car's plan sends to `travel.hotel.book`: the route's stop for tonight, the driver's goal input */
function plannedInput (): Record<string, unknown> {
  const trip = readJson('data/trip.json')
  return { near: trip.route.stop, nights: 1, maxPrice: 500, guest: 'C. Martin' }
}

/** A skill context with what the hotel handler uses */
function ctx (id: string): any {
  return { task: { id }, signal: new AbortController().signal, progress: () => {}, caller: 'did:key:zCaller', chain: { root: 'did:key:zRoot' } }
}

describe.each(HOTELS)('%s: travel.hotel.book inputSchema', (file) => {
  const { inputSchema, options } = hotelSkill(file)
  const schema = z.fromJSONSchema(inputSchema as any)

  it('accepts the input the car plans to send, and the hotel module books with it', async () => {
    const input = plannedInput()
    expect(schema.safeParse(input).success).toBe(true)
    const { default: hotel } = await import(new URL('agents/hotel.js', CAR).href)
    const impl = await hotel({ agent: { did: 'did:key:zHotel' }, options: { ...options, outage: false }, log: () => {} })
    const booked = await impl.handlers['travel.hotel.book'](input, ctx(`t-${file}`))
    expect(booked.hotel.city).toBe('Lyon')
    expect(booked.nights).toBe(1)
  })

  it.each([
    ['a place without a city (the handler looks rooms up by near.city)', { near: { area: 'Part-Dieu' }, nights: 1 }],
    ['a place given as a bare string', { near: 'Lyon', nights: 1 }],
    ['nights that are not a whole number', { near: { city: 'Lyon' }, nights: 'two' }],
    ['no night at all', { near: { city: 'Lyon' }, nights: 0 }],
    ['a price that is not a number', { near: { city: 'Lyon' }, nights: 1, maxPrice: 'cheap' }],
    ['no place', { nights: 1 }]
  ])('refuses %s', (_what, input) => {
    expect(schema.safeParse(input).success).toBe(false)
  })
})
