/**
 * Every field of the node's config file is documented for users (issue 11
 * item 13: `behindGateways` was only to be found in the zod schema): the
 * "Config file" section of the node README names each field of the schema,
 * and `docs/cli.md` explains the fields of `behindGateways`.
 */
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { NodeConfigSchema } from '../src/index.js'

const README = readFileSync(new URL('../README.md', import.meta.url), 'utf8')
const CLI = readFileSync(new URL('../../../docs/cli.md', import.meta.url), 'utf8')

/** The text of a markdown section, from its heading to the next heading of its level */
function section (text: string, heading: string): string {
  const start = text.indexOf(`\n${heading}\n`)
  if (start < 0) throw new Error(`no section ${heading}`)
  const level = heading.split(' ')[0]
  const end = text.indexOf(`\n${level} `, start + heading.length + 2)
  return text.slice(start, end < 0 ? undefined : end)
}

/** The schema under optional, default and array wrappers */
function inner (schema: any): any {
  let s = schema
  for (let i = 0; i < 8; i++) {
    const type = s?._zod?.def?.type
    if (type === 'optional' || type === 'default' || type === 'nullable') s = s._zod.def.innerType
    else if (type === 'array') s = s._zod.def.element
    else break
  }
  return s
}

/** Dotted paths of the fields of an object schema, two levels deep (`tasks.leaseInterval`, `behindGateways.outer`) */
function fields (schema: any, prefix = '', depth = 0): string[] {
  const shape = inner(schema)?._zod?.def?.shape as Record<string, unknown> | undefined
  if (shape == null) return []
  const out: string[] = []
  for (const [name, field] of Object.entries(shape)) {
    const path = prefix === '' ? name : `${prefix}.${name}`
    out.push(path)
    if (depth < 1) out.push(...fields(field, path, depth + 1))
  }
  return out
}

describe('the config reference', () => {
  it('the node README names every field of the config schema', () => {
    const text = section(README, '## Config file')
    const paths = fields(NodeConfigSchema)
    expect(paths).toContain('behindGateways.outer')
    // a field is named as `field`, `parent.field` or `parent[].field`; a section by its fields (`tasks.maxDepth`, `agents[]`)
    const names = (p: string): string[] => [`\`${p}\``, `\`${p.split('.').at(-1)!}\``, `\`${p.replace('.', '[].')}\``, `\`${p}.`, `\`${p}[]`]
    const missing = paths.filter(p => !names(p).some(n => text.includes(n)))
    expect(missing).toEqual([])
  })

  it('the node README and docs/cli.md say what behindGateways, outer and inner are', () => {
    for (const [name, text] of [['README', section(README, '## Config file')], ['docs/cli.md', section(CLI, '### `ioa start`')]]) {
      expect(text, name).toContain('`behindGateways`')
      expect(text, name).toMatch(/`outer`[^\n]*(public network)/)
      expect(text, name).toMatch(/`inner`[^\n]*(domain network)/)
    }
  })
})
