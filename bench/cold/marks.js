// What a cold client (bench/cold/ioa-client.js, a2a-client.js) measures at
// its marks: the CPU time of the process (user + system, ms) and, in the
// untimed trial run with bench/cold/count-modules.js, the number of modules
// loaded so far.
import { readFileSync } from 'node:fs'

/** CPU time of this process so far, ms */
export function cpuMs () {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1000
}

/** Modules loaded so far (counted by count-modules.js), or undefined when not counting */
export function modulesLoaded () {
  const file = process.env.COLD_MODULES
  if (file == null || file === '') return undefined
  return readFileSync(file, 'utf8').split('\n').filter(l => l !== '').length
}
