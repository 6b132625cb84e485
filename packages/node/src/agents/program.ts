/**
 * Whether an agent program of a config can be run, checked before the node
 * starts: a missing or non-executable program is a config error of its
 * field, not a start-up failure after the node is up.
 */
import { constants } from 'node:fs'
import { access, stat } from 'node:fs/promises'
import { delimiter, isAbsolute, join } from 'node:path'

/** Why `file` cannot be run, or undefined */
async function fileProblem (file: string): Promise<string | undefined> {
  try {
    const s = await stat(file)
    if (!s.isFile()) return `${file} is not a file`
  } catch (err: any) {
    return err?.code === 'ENOENT' ? `${file} does not exist` : `${file}: ${err?.code ?? err?.message ?? err}`
  }
  if (process.platform === 'win32') return undefined
  try {
    await access(file, constants.X_OK)
    return undefined
  } catch {
    // the access check's "no" is the answer
    return `${file} is not executable (chmod +x it, or name its interpreter first: ["python3", "${file}"])`
  }
}

/**
 * Why the program `argv0` cannot be run, or undefined: a path (absolute, or
 * resolved from the config's directory) must be an executable file; a bare
 * name must be one in a directory of `PATH`
 */
export async function programProblem (argv0: string, env: Record<string, string | undefined> = process.env): Promise<string | undefined> {
  if (isAbsolute(argv0) || argv0.includes('/')) return fileProblem(argv0)
  // Windows finds programs by PATHEXT too: left to the start
  if (process.platform === 'win32') return undefined
  const dirs = (env.PATH ?? '').split(delimiter).filter(d => d !== '')
  for (const dir of dirs) {
    if (await fileProblem(join(dir, argv0)) == null) return undefined
  }
  return `no program "${argv0}" in PATH`
}
