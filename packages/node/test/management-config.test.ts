/**
 * The node config's `management` section (spec/management.md 2.1): its
 * errors name the field, and it reaches the node's options.
 */
import { describe, expect, it } from 'vitest'
import { errorOf } from '../../../test/util.js'
import { initFromConfig, parseConfig } from '../src/index.js'

/** A domain network key (64 hex digits): a gateway needs one */
const PSK = 'ab'.repeat(32)
const DID = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'

describe('the management section of the config', () => {
  it('takes host:port with an IP address or localhost, a role and an operator did', () => {
    for (const http of ['127.0.0.1:9464', '[::1]:0', 'localhost:9464', '0.0.0.0:80']) {
      expect(parseConfig({ management: { http } }).management?.http).toBe(http)
    }
    const c = parseConfig({ management: { http: '127.0.0.1:0', role: 'agent', operator: DID } })
    expect(initFromConfig(c).management).toEqual({ http: '127.0.0.1:0', role: 'agent', operator: DID })
    expect(initFromConfig(parseConfig({})).management).toBeUndefined()
  })

  it('takes tracing (an OTLP/HTTP URL, a sample ratio, a service name) and a gateway\'s keepTrace', () => {
    const tracing = { otlp: 'http://127.0.0.1:4318/v1/traces', sampleRatio: 0.25, serviceName: 'car' }
    expect(initFromConfig(parseConfig({ management: { tracing } })).management).toEqual({ tracing })
    const gateway = { exports: [{ skill: 'travel.hotel.book' }], keepTrace: true }
    expect(initFromConfig(parseConfig({ domainPsk: PSK, gateway })).gateway?.keepTrace).toBe(true)
    expect(initFromConfig(parseConfig({ domainPsk: PSK, gateway: { exports: gateway.exports } })).gateway?.keepTrace).toBeUndefined()
    expect(errorOf(() => parseConfig({ gateway: { ...gateway, keepTrace: 'yes' } }))).toMatchObject({ name: 'ConfigError', field: 'gateway.keepTrace' })
  })

  it('names the bad field', () => {
    const cases: Array<[unknown, string, RegExp]> = [
      [{ http: 'metrics.example:9464' }, 'management.http', /not host:port/],
      [{ http: '127.0.0.1' }, 'management.http', /not host:port/],
      [{ http: '127.0.0.1:65536' }, 'management.http', /above 65535/],
      [{ http: '[fe80::zz]:1' }, 'management.http', /not host:port/],
      [{ http: '999.1.1.1:1' }, 'management.http', /not an IP address/],
      [{ role: 'controller' }, 'management.role', /agent/],
      [{ operator: 'did:web:example.com' }, 'management.operator', /did:key/],
      [{ port: 9464 }, 'management', /unknown field "port"/],
      [{ tracing: { otlp: 'localhost:4318' } }, 'management.tracing.otlp', /http\(s\) URL/],
      [{ tracing: { otlp: 'http://127.0.0.1:4318/v1/traces', sampleRatio: 1.5 } }, 'management.tracing.sampleRatio', /1/],
      [{ tracing: { otlp: 'http://127.0.0.1:4318/v1/traces', serviceName: '' } }, 'management.tracing.serviceName', /./],
      [{ tracing: {} }, 'management.tracing.otlp', /./]
    ]
    for (const [management, field, message] of cases) {
      const err = errorOf(() => parseConfig({ management }))
      expect(err, JSON.stringify(management)).toMatchObject({ name: 'ConfigError', code: 'INVALID_CONFIG', field })
      expect(err.message).toMatch(message)
    }
  })
})
