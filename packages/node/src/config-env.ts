/**
 * `${NAME}` in the string values of a config file: replaced by the
 * environment variable's value when the file is loaded, so one file serves
 * several machines (trusted roots, gateway peer ids, addresses). The rules
 * (docs/cli.md, "Environment variables in a config file"):
 *
 * - `${NAME}`, NAME of letters, digits and `_` not starting with a digit, is
 *   the variable's value (an empty value is kept); an unset variable is a
 *   `ConfigError` naming the variable and the field;
 * - `$${` is a literal `${` (nothing is substituted after it);
 * - a `${` that does not start a `${NAME}` is a `ConfigError`;
 * - any other `$` is kept; keys, numbers and booleans are never changed; a
 *   substituted value is not scanned again.
 */
import { ConfigError } from './errors.js'

const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/

/** Largest JSON nesting walked (a config is shallow; deeper input is refused by the schema anyway) */
const MAX_DEPTH = 64

/**
 * A copy of a parsed config file with every `${NAME}` of its string values
 * replaced from `env`
 */
export function substituteEnv (value: unknown, env: Record<string, string | undefined>): unknown {
  return walk(value, env, [])
}

function walk (value: unknown, env: Record<string, string | undefined>, path: string[]): unknown {
  if (typeof value === 'string') return substitute(value, env, path)
  if (value == null || typeof value !== 'object') return value
  if (path.length >= MAX_DEPTH) throw new ConfigError(`Invalid config at "${path.join('.')}": nested deeper than ${MAX_DEPTH} levels`, path.join('.'))
  if (Array.isArray(value)) return value.map((v, i) => walk(v, env, [...path, String(i)]))
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) out[k] = walk(v, env, [...path, k])
  return out
}

/** One string value with its `${NAME}` replaced */
function substitute (text: string, env: Record<string, string | undefined>, path: string[]): string {
  if (!text.includes('${')) return text
  const field = path.join('.')
  let out = ''
  let i = 0
  while (i < text.length) {
    const at = text.indexOf('$', i)
    if (at < 0) break
    out += text.slice(i, at)
    if (text.startsWith('$${', at)) {
      out += '${'
      i = at + 3
      continue
    }
    if (!text.startsWith('${', at)) {
      out += '$'
      i = at + 1
      continue
    }
    const end = text.indexOf('}', at + 2)
    const name = end < 0 ? undefined : text.slice(at + 2, end)
    if (name == null || !NAME.test(name)) {
      const shown = text.slice(at, end < 0 ? at + 40 : Math.min(end + 1, at + 40))
      throw new ConfigError(`Invalid config at "${field}": "${shown}" is not a \${NAME} substitution (NAME: letters, digits and _; write $\${ for a literal \${)`, field)
    }
    const v = env[name]
    if (v == null) throw new ConfigError(`Invalid config at "${field}": the environment variable ${name} is not set (the value uses \${${name}})`, field)
    out += v
    i = end + 1
  }
  return out + text.slice(i)
}
