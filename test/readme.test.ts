/**
 * README code examples cannot rot: each one is a copy of code that the tests
 * typecheck and run.
 *
 * The convention, for every README.md of the repository (the root one,
 * `packages/*\/README.md`, `scenarios/**\/README.md`, any other):
 *
 * - A fenced TypeScript or JavaScript block (```` ```ts ````, `typescript`,
 *   `tsx`, `mts`, `js`, `javascript`, `jsx`, `mjs`) is directly preceded by a
 *   marker line (no blank line between):
 *
 *   ```md
 *   <!-- example: examples/quickstart.ts -->
 *   <!-- example: examples/audit-layer.ts#layer -->
 *   <!-- example: none: the type signature only -->
 *   ```
 *
 * - `<!-- example: <path> -->`: the block appears verbatim in that file
 *   (path from the repository root): its lines are consecutive lines of the
 *   file, possibly all indented by the same extra whitespace. Trailing
 *   whitespace and the blank lines around the block do not count; region
 *   marker lines of the file are skipped. A line `// …` (or `// ...`) in the
 *   block stands for left-out lines: the parts between such lines appear in
 *   the file in that order (to show the imports and the body of a function,
 *   say).
 * - `<!-- example: <path>#<name> -->`: the same, inside the region of the file
 *   between `// #region <name>` and its `// #endregion`.
 * - `<!-- example: none: <reason> -->`: opts a block out, with a reason. Keep
 *   it rare (type signatures, fragments that cannot stand alone).
 * - A marker before a block of another language (say ```` ```json ````) is
 *   checked the same way. A marker not followed by a fenced block is an error.
 * - A TypeScript file named by a marker must be part of a typechecked project
 *   (a `tsconfig.json` of the repository: `test/tsconfig.json` includes
 *   `examples/**`), so `npm test` typechecks it; `test/examples.test.ts` runs
 *   the examples.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { mkdtemp, rm, symlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import { until } from './util.js'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const SKIP_DIRS = new Set(['node_modules', 'dist', 'coverage', '.git'])

/** Languages whose fenced blocks need a marker */
const CODE_LANGS = new Set(['ts', 'typescript', 'tsx', 'mts', 'js', 'javascript', 'jsx', 'mjs'])
const MARKER = /^\s*<!--\s*example:\s*(.*?)\s*-->\s*$/
const FENCE = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/
const REGION_START = /^\s*\/\/\s*#region\s+(\S+)\s*$/
const REGION_END = /^\s*\/\/\s*#endregion\b/

// ---------------------------------------------------------------------------
// the checker

interface CodeBlock {
  /** 1-based line of the opening fence */
  line: number
  lang: string
  code: string[]
  /** The marker's text after `example:`, when the line before the fence is one */
  marker?: string
}

/** The fenced blocks of a markdown text, with the marker directly above each; dangling markers as problems */
function parseMarkdown (text: string): { blocks: CodeBlock[], problems: string[] } {
  const lines = text.split(/\r?\n/)
  const blocks: CodeBlock[] = []
  const problems: string[] = []
  let pending: { text: string, line: number } | undefined
  for (let i = 0; i < lines.length; i++) {
    const fence = FENCE.exec(lines[i])
    const marker = MARKER.exec(lines[i])
    if (fence == null) {
      if (pending != null) problems.push(`line ${pending.line}: the marker "${pending.text}" is not directly followed by a fenced block`)
      pending = marker != null ? { text: marker[1], line: i + 1 } : undefined
      continue
    }
    const [, indent, ticks, lang] = fence
    const code: string[] = []
    let j = i + 1
    for (; j < lines.length; j++) {
      const close = new RegExp(`^\\s{0,${indent.length + 3}}${ticks[0] === '`' ? '`' : '~'}{${ticks.length},}\\s*$`)
      if (close.test(lines[j])) break
      code.push(lines[j].startsWith(indent) ? lines[j].slice(indent.length) : lines[j].trimStart())
    }
    if (j >= lines.length) problems.push(`line ${i + 1}: the fenced block is never closed`)
    blocks.push({ line: i + 1, lang: lang.toLowerCase(), code, marker: pending?.text })
    pending = undefined
    i = j
  }
  if (pending != null) problems.push(`line ${pending.line}: the marker "${pending.text}" is not directly followed by a fenced block`)
  return { blocks, problems }
}

/** Lines without trailing whitespace and without the blank lines around them */
function trimLines (lines: string[]): string[] {
  const out = lines.map(l => l.trimEnd())
  while (out.length > 0 && out[0] === '') out.shift()
  while (out.length > 0 && out[out.length - 1] === '') out.pop()
  return out
}

/** The lines of `source` to compare against: the whole file, or one region, without region markers */
function sourceLines (source: string, region?: string): string[] | string {
  const lines = source.split(/\r?\n/)
  if (region == null) return lines.filter(l => !REGION_START.test(l) && !REGION_END.test(l))
  const starts = lines.flatMap((l, i) => REGION_START.exec(l)?.[1] === region ? [i] : [])
  if (starts.length !== 1) return starts.length === 0 ? `no region "${region}"` : `region "${region}" is defined ${starts.length} times`
  let depth = 0
  const out: string[] = []
  for (const l of lines.slice(starts[0] + 1)) {
    if (REGION_START.test(l)) {
      depth++
      continue
    }
    if (REGION_END.test(l)) {
      if (depth === 0) return out
      depth--
      continue
    }
    out.push(l)
  }
  return `region "${region}" has no // #endregion`
}

/** A block line that stands for lines of the file left out of the block */
const ELISION = /^\s*\/\/\s*(…|\.\.\.)\s*$/

/**
 * Where the lines of `want` appear as consecutive lines of `have` (from
 * `from` on), all shifted by the same indentation: the index after them, or -1
 */
function findRun (want: string[], have: string[], from: number): number {
  for (let i = from; i + want.length <= have.length; i++) {
    if (!have[i].endsWith(want[0])) continue
    const indent = have[i].slice(0, have[i].length - want[0].length)
    if (indent.trim() !== '') continue
    if (want.every((w, k) => w === '' ? have[i + k] === '' : have[i + k] === indent + w)) return i + want.length
  }
  return -1
}

/**
 * Does the block appear in `source`? Its parts between elision lines
 * (`// …`) must appear in order, each as consecutive lines.
 */
function appearsIn (block: string[], source: string[]): boolean {
  const have = source.map(l => l.trimEnd())
  const parts: string[][] = [[]]
  for (const line of block) {
    if (ELISION.test(line)) parts.push([])
    else parts[parts.length - 1].push(line)
  }
  let at = 0
  let matched = 0
  for (const part of parts.map(trimLines)) {
    if (part.length === 0) continue
    at = findRun(part, have, at)
    if (at < 0) return false
    matched++
  }
  return matched > 0
}

interface CheckContext {
  /** The text of a repository file (path from the root), or undefined when there is none */
  read(path: string): string | undefined
  /** Is this TypeScript file typechecked by some project of the repository? */
  typechecked(path: string): boolean
}

/** Every problem of one README's code blocks (empty: the README follows the convention) */
function checkReadme (text: string, ctx: CheckContext): string[] {
  const { blocks, problems } = parseMarkdown(text)
  for (const block of blocks) {
    const where = `line ${block.line}`
    if (block.marker == null) {
      if (CODE_LANGS.has(block.lang)) problems.push(`${where}: a \`\`\`${block.lang} block without an <!-- example: … --> marker`)
      continue
    }
    if (/^none\b/.test(block.marker)) {
      if (!/^none:\s*\S/.test(block.marker)) problems.push(`${where}: an opt-out needs a reason: <!-- example: none: <reason> -->`)
      continue
    }
    const [path, region, extra] = block.marker.split('#')
    if (extra != null || path === '' || region === '') {
      problems.push(`${where}: a marker is <!-- example: <path> -->, <!-- example: <path>#<region> --> or <!-- example: none: <reason> -->, not "${block.marker}"`)
      continue
    }
    const source = ctx.read(path)
    if (source == null) {
      problems.push(`${where}: ${path} does not exist`)
      continue
    }
    if (/\.(ts|tsx|mts|cts)$/.test(path) && !ctx.typechecked(path)) {
      problems.push(`${where}: ${path} is not typechecked by any tsconfig.json (add it to test/tsconfig.json's include)`)
    }
    const lines = sourceLines(source, region)
    if (typeof lines === 'string') {
      problems.push(`${where}: ${path}: ${lines}`)
      continue
    }
    if (!appearsIn(block.code, lines)) {
      problems.push(`${where}: the block does not appear verbatim in ${block.marker}`)
    }
  }
  return problems
}

// ---------------------------------------------------------------------------
// the repository

function walk (dir: string, found: (path: string) => void): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name) && !entry.name.startsWith('.')) walk(join(dir, entry.name), found)
    } else if (entry.isFile()) {
      found(join(dir, entry.name))
    }
  }
}

const files: string[] = []
walk(ROOT, p => { files.push(relative(ROOT, p).split(sep).join('/')) })
const readmes = files.filter(p => p === 'README.md' || p.endsWith('/README.md')).sort()

let checked: Set<string> | undefined
/** Absolute paths of every file of every tsconfig.json project in the repository */
function typecheckedFiles (): Set<string> {
  if (checked != null) return checked
  checked = new Set()
  for (const config of files.filter(p => p.endsWith('tsconfig.json'))) {
    const parsed = ts.getParsedCommandLineOfConfigFile(join(ROOT, config), {}, {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: () => {}
    })
    for (const f of parsed?.fileNames ?? []) checked.add(resolve(f))
  }
  return checked
}

const repository: CheckContext = {
  read (path) {
    const abs = resolve(ROOT, path)
    if (!abs.startsWith(ROOT + sep) || !existsSync(abs)) return undefined
    return readFileSync(abs, 'utf8')
  },
  typechecked: path => typecheckedFiles().has(resolve(ROOT, path))
}

describe('README code blocks', () => {
  it('finds the READMEs of the repository', () => {
    expect(readmes).toContain('README.md')
    expect(readmes).toContain('packages/node/README.md')
    expect(readmes.some(r => r.startsWith('node_modules/') || r.includes('/node_modules/'))).toBe(false)
  })

  it('packages/node/README.md shows the quick start and the audit layer from examples/', () => {
    const { blocks } = parseMarkdown(readFileSync(join(ROOT, 'packages/node/README.md'), 'utf8'))
    const markers = blocks.map(b => b.marker)
    expect(markers).toContain('examples/quickstart.ts')
    expect(markers).toContain('examples/audit-layer.ts#layer')
  })

  for (const readme of readmes) {
    it(`${readme}: every code block is marked and matches its example`, () => {
      expect(checkReadme(readFileSync(join(ROOT, readme), 'utf8'), repository)).toEqual([])
    })
  }
})

describe('the README checker', () => {
  const example = [
    '// a file',
    'export function f (): number {',
    '  // #region body',
    '  const a = 1',
    '',
    '  return a',
    '  // #endregion',
    '}',
    '// #region tail',
    'export const b = 2',
    '// #endregion'
  ].join('\n')
  const ctx: CheckContext = {
    read: path => path === 'ex.ts' ? example : undefined,
    typechecked: path => path === 'ex.ts'
  }
  const md = (marker: string | undefined, code: string[], lang = 'ts'): string =>
    ['# Title', '', ...(marker != null ? [`<!-- example: ${marker} -->`] : []), '```' + lang, ...code, '```', ''].join('\n')

  it('accepts blocks copied from a file or a region, at any common indentation', () => {
    expect(checkReadme(md('ex.ts', ['export function f (): number {', '  const a = 1']), ctx)).toEqual([])
    expect(checkReadme(md('ex.ts#body', ['const a = 1', '', 'return a']), ctx)).toEqual([])
    expect(checkReadme(md('ex.ts#tail', ['export const b = 2  ']), ctx)).toEqual([])
    // region markers inside the file are skipped when the whole file is compared
    expect(checkReadme(md('ex.ts', ['}', 'export const b = 2']), ctx)).toEqual([])
    expect(checkReadme(md('none: a type signature', ['type X = (a: number) => void']), ctx)).toEqual([])
    expect(checkReadme(md(undefined, ['npm test'], 'sh'), ctx)).toEqual([])
    // left-out lines
    expect(checkReadme(md('ex.ts', ['// a file', '// …', 'return a', '// ...', 'export const b = 2']), ctx)).toEqual([])
  })

  it('reports unmarked, changed, misplaced and unresolvable blocks', () => {
    const problems = (text: string): string => checkReadme(text, ctx).join('\n')
    expect(problems(md(undefined, ['const a = 1']))).toMatch(/```ts block without an <!-- example/)
    expect(problems(md(undefined, ['const a = 1'], 'javascript'))).toMatch(/```javascript block without/)
    expect(problems(md('ex.ts#body', ['const a = 2']))).toMatch(/does not appear verbatim in ex.ts#body/)
    // lines out of order or with different relative indentation do not match
    expect(problems(md('ex.ts#body', ['return a', 'const a = 1']))).toMatch(/does not appear verbatim/)
    expect(problems(md('ex.ts', ['export function f (): number {', 'const a = 1']))).toMatch(/does not appear verbatim/)
    // a block of one region is not in another
    expect(problems(md('ex.ts#tail', ['const a = 1']))).toMatch(/does not appear verbatim/)
    expect(problems(md('ex.ts#nope', ['const a = 1']))).toMatch(/no region "nope"/)
    expect(problems(md('missing.ts', ['const a = 1']))).toMatch(/missing.ts does not exist/)
    expect(problems(md('none', ['const a = 1']))).toMatch(/opt-out needs a reason/)
    expect(problems(md('ex.ts#a#b', ['const a = 1']))).toMatch(/a marker is/)
    expect(problems(md('ex.ts', []))).toMatch(/does not appear verbatim/)
    expect(problems(md('ex.ts', ['// …']))).toMatch(/does not appear verbatim/)
    // the parts around a left-out part keep their order
    expect(problems(md('ex.ts', ['export const b = 2', '// …', '// a file']))).toMatch(/does not appear verbatim/)
    // the marker must sit on the line right before the fence
    expect(problems(['<!-- example: ex.ts -->', '', '```ts', 'const a = 1', '```'].join('\n'))).toMatch(/not directly followed by a fenced block[\s\S]*without an <!-- example/)
    expect(problems('text\n<!-- example: ex.ts -->\n')).toMatch(/not directly followed/)
    expect(checkReadme(md('ex.ts#tail', ['export const b = 2']), { ...ctx, typechecked: () => false }).join('\n')).toMatch(/not typechecked/)
  })

  it('parses fences of any length and with ~~~, and ignores markers inside blocks', () => {
    const text = ['````ts', '```', '<!-- example: none: inside -->', '````', '~~~js', 'x', '~~~'].join('\n')
    const { blocks, problems } = parseMarkdown(text)
    expect(problems).toEqual([])
    expect(blocks.map(b => [b.lang, b.code])).toEqual([['ts', ['```', '<!-- example: none: inside -->']], ['js', ['x']]])
  })

  it('knows which files the tsconfig projects typecheck', () => {
    expect(repository.typechecked('examples/audit-layer.ts')).toBe(true)
    expect(repository.typechecked('packages/node/src/index.ts')).toBe(true)
    expect(repository.typechecked('examples/node.json')).toBe(false)
  })
})

// ---------------------------------------------------------------------------
// the README's `ioa` block runs as written (issue 11 item 5)

const BIN = join(ROOT, 'packages/node/bin/ioa.js')

/** The commands of the first ```sh block of a README section: continuation lines joined, comments dropped */
function shellCommands (readme: string, heading: string): string[] {
  const section = readme.slice(readme.indexOf(heading))
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? ''
  return block.replace(/\\\n\s*/g, ' ').split('\n').map(l => l.replace(/\s+# .*$/, '').trim()).filter(l => l !== '')
}

/** Run one line in bash, `npx ioa` being this repository's built bin */
async function sh (line: string, cwd: string, env: Record<string, string>): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const npx = `npx () { if [ "$1" = ioa ]; then shift; "${process.execPath}" "${BIN}" "$@"; else command npx "$@"; fi; }`
  const child = spawn('bash', ['-c', `${npx}\n${line}`], { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
  const [code] = await once(child, 'close') as [number | null]
  clearTimeout(timer)
  return { code, stdout, stderr }
}

describe('the README\'s ioa block', () => {
  it('runs as written: start, discover, keys, a per-skill delegation, submit with it, task', async () => {
    const commands = shellCommands(readFileSync(join(ROOT, 'README.md'), 'utf8'), '## The `ioa` command')
    expect(commands[0]).toMatch(/^npx ioa start /)
    const dir = await mkdtemp(join(tmpdir(), 'readme-cli-'))
    await symlink(join(ROOT, 'scenarios'), join(dir, 'scenarios'))
    const env: Record<string, string> = { IOA_HOME: join(dir, 'home') }
    delete process.env.IOA_BOOTSTRAP
    const [, ...startArgs] = commands[0].split(/\s+/).slice(1)
    const node = spawn(process.execPath, [BIN, ...startArgs, '--json'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
    const lines: any[] = []
    createInterface({ input: node.stdout }).on('line', l => { lines.push(JSON.parse(l)) })
    try {
      const ready = await until(() => lines[0], { timeout: 30_000, what: 'the node\'s ready line' })
      let submitted: { task: string, to: string } | undefined
      for (const line of commands.slice(1)) {
        const exported = /^export IOA_BOOTSTRAP=/.exec(line)
        if (exported != null) {
          env.IOA_BOOTSTRAP = ready.addresses[0]
          continue
        }
        const run = await sh(submitted != null ? line.replace('<task id>', submitted.task).replace('did:key:z6Mk…', submitted.to) : line, dir, env)
        expect(run.code, `${line}\n${run.stderr}`).toBe(0)
        const printed = /^task (\S+) {2}\S+ → (did:key:\S+)/m.exec(run.stdout)
        if (/ioa submit /.test(line)) {
          expect(printed, run.stdout).not.toBeNull()
          expect(run.stdout).toContain('completed')
          expect(run.stdout).toContain('"stop"')
          submitted = { task: printed![1], to: printed![2] }
        }
        if (/ioa discover /.test(line)) expect(run.stdout, `${line}\n${run.stderr}`).toContain('Maps')
      }
      expect(submitted).toBeDefined()
    } finally {
      node.kill('SIGKILL')
      await once(node, 'exit').catch(() => {})
      await rm(dir, { recursive: true, force: true })
    }
  }, 180_000)
})
