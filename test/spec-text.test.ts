/**
 * The normative text of `spec/` states its rules itself: it never sends an
 * implementer to a source file of the reference implementation (issue 11
 * item 19). Informative pointers to runnable example programs are allowed;
 * a draft (`Status: **draft**`, a design not yet normative) is not checked.
 */
import { readdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { readSpec } from './util.js'

const SPEC_FILES = readdirSync(fileURLToPath(new URL('../spec/', import.meta.url))).filter(f => f.endsWith('.md'))

/** A TypeScript file name, or a path into a package's sources */
const SOURCE_POINTER = /[\w./-]+\.ts\b|\bsrc\/|\bdist\//

describe('spec/ points at no source file', () => {
  it('there are spec files', () => {
    expect(SPEC_FILES).toContain('collab-tasks.md')
  })

  it.each(SPEC_FILES)('%s', (file) => {
    const text = readSpec(file)
    if (/^Status: \*\*draft\*\*/m.test(text.split('\n').slice(0, 10).join('\n'))) return
    const hits = text.split('\n')
      .map((line, i) => ({ line: i + 1, text: line }))
      .filter(l => SOURCE_POINTER.test(l.text))
      .map(l => `${file}:${l.line}: ${l.text.trim().slice(0, 120)}`)
    expect(hits).toEqual([])
  })
})
