/**
 * The node config's `management` section (spec/management.md 2.1): its
 * errors name the field, and it reaches the node's options.
 */
import { delegate } from '@ioa/collab'
import { encodeToken } from '@ioa/collab/wire'
import { createIdentity } from '@ioa/interconnect'
import { DASHBOARD_DEFAULTS, HTTP_DEFAULTS } from '@ioa/management'
import { describe, expect, it } from 'vitest'
import { errorOf } from '../../../test/util.js'
import { DEFAULT_REQUEST_TIMEOUT } from '../src/config-management.js'
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

  it('names the bad field', async () => {
    const operator = await createIdentity()
    const token = Buffer.from(encodeToken(await delegate(operator, { audience: operator.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + 60_000 }))).toString('base64url')
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
      [{ tracing: {} }, 'management.tracing.otlp', /./],
      [{ http: { listen: 'metrics.example:1' } }, 'management.http.listen', /not host:port/],
      [{ http: { maxConnections: 4 } }, 'management.http.listen', /./],
      [{ http: { listen: '127.0.0.1:0', port: 1 } }, 'management.http', /unknown field "port"/],
      [{ http: { listen: '127.0.0.1:0', maxConnectionsPerAddress: 0 } }, 'management.http.maxConnectionsPerAddress', /./],
      [{ http: { listen: '127.0.0.1:0', maxLoginLinks: 0 } }, 'management.http.maxLoginLinks', /./],
      [{ http: { listen: '127.0.0.1:0', loginLinkTtl: 2 ** 31 } }, 'management.http.loginLinkTtl', /./],
      [{ http: { listen: '127.0.0.1:0', maxLoginProofTtl: 10 } }, 'management.http.maxLoginProofTtl', /./],
      [{ http: { listen: '127.0.0.1:0', maxUsedProofs: 1.5 } }, 'management.http.maxUsedProofs', /./],
      [{ http: { listen: '127.0.0.1:0', maxHeaderBytes: 100 } }, 'management.http.maxHeaderBytes', /1024/],
      [{ http: { listen: '127.0.0.1:0', headersTimeout: 40_000 } }, 'management.http.headersTimeout', /at most requestTimeout \(30000 ms\)/],
      [{ http: { listen: '127.0.0.1:0', headersTimeout: 5_000, requestTimeout: 4_000 } }, 'management.http.headersTimeout', /at most requestTimeout/],
      [{ http: { listen: '127.0.0.1:0', allowedHosts: ['not a host'] } }, 'management.http.allowedHosts.0', /host name/],
      [{ http: { listen: '127.0.0.1:0', dashboard: { maxEvents: 0 } } }, 'management.http.dashboard.maxEvents', /./],
      [{ http: { listen: '127.0.0.1:0', dashboard: { ring: 5 } } }, 'management.http.dashboard', /unknown field "ring"/],
      [{ role: 'agent', proofs: ['not-a-token'] }, 'management.proofs.0', /not a delegation token/],
      [{ role: 'agent', proofs: [] }, 'management.proofs', /./],
      [{ proofs: [token] }, 'management.proofs', /only with role "agent"/],
      [{ proofsFile: 'grant.token' }, 'management.proofsFile', /only with role "agent"/],
      [{ role: 'agent', proofs: [token], proofsFile: 'grant.token' }, 'management.proofsFile', /not both/]
    ]
    for (const [management, field, message] of cases) {
      const err = errorOf(() => parseConfig({ management }))
      expect(err, JSON.stringify(management)).toMatchObject({ name: 'ConfigError', code: 'INVALID_CONFIG', field })
      expect(err.message).toMatch(message)
    }
  })

  it('takes management.http as an object: the address, the server\'s limits and the dashboard\'s reach the node\'s options', () => {
    const http = {
      listen: '127.0.0.1:0',
      allowedHosts: ['metrics.internal'],
      maxConnections: 8,
      maxConnectionsPerAddress: 2,
      maxRequestBytes: 4096,
      maxHeaderBytes: 2048,
      headersTimeout: 1000,
      requestTimeout: 2000,
      keepAliveTimeout: 500,
      maxLoginLinks: 3,
      loginLinkTtl: 60_000,
      maxLoginProofTtl: 120_000,
      maxUsedProofs: 16,
      dashboard: { maxEvents: 50, maxBatch: 10, maxWait: 1000, maxWaits: 2 }
    }
    expect(initFromConfig(parseConfig({ management: { http } })).management).toEqual({
      http: '127.0.0.1:0',
      allowedHosts: ['metrics.internal'],
      httpLimits: { maxConnections: 8, maxConnectionsPerAddress: 2, maxRequestBytes: 4096, maxHeaderBytes: 2048, headersTimeout: 1000, requestTimeout: 2000, keepAliveTimeout: 500, maxLoginLinks: 3, loginLinkTtl: 60_000 },
      loginLimits: { maxLoginProofTtl: 120_000, maxUsedProofs: 16 },
      dashboard: { maxEvents: 50, maxBatch: 10, maxWait: 1000, maxWaits: 2 }
    })
    expect(initFromConfig(parseConfig({ management: { http: { listen: '[::1]:9464' } } })).management).toEqual({ http: '[::1]:9464' })
    // the config's bound of headersTimeout is the server's default requestTimeout
    expect(DEFAULT_REQUEST_TIMEOUT).toBe(HTTP_DEFAULTS.requestTimeout)
    expect(DASHBOARD_DEFAULTS.maxEvents).toBe(1000)
  })

  it('takes a management agent\'s grant as token strings: the node gets the tokens', async () => {
    const operator = await createIdentity()
    const agentKey = await createIdentity()
    const grant = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + 3_600_000 })
    const text = Buffer.from(encodeToken(grant)).toString('base64url')
    const m = initFromConfig(parseConfig({ management: { role: 'agent', operator: operator.did, proofs: [text] } })).management
    expect(m?.proofs).toHaveLength(1)
    expect(m?.proofs?.[0].payload).toEqual(grant.payload)
    expect(Buffer.from(m?.proofs?.[0].sig ?? []).equals(Buffer.from(grant.sig))).toBe(true)
  })
})
