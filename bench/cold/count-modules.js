// Preloaded (`node --import bench/cold/count-modules.js`) by the untimed
// trial of each kind of the `cold` group (bench/cold.js): a module hook
// appends the URL of every module the process loads to the file named by
// COLD_MODULES, before the module is evaluated, so a count taken at any
// point of the trial (bench/cold/marks.js) is exact. Module counts do not
// depend on the machine's load, as times do.
import { register } from 'node:module'

const file = process.env.COLD_MODULES
if (file == null || file === '') throw new Error('count-modules.js needs COLD_MODULES=<file>')
const hook = `import { appendFileSync } from 'node:fs'
export async function load (url, context, next) {
  appendFileSync(${JSON.stringify(file)}, url + '\\n')
  return next(url, context)
}`
register('data:text/javascript,' + encodeURIComponent(hook))
