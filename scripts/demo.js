// `npm run demo`: the scenarios across separate OS processes on 127.0.0.1
// (the car assistant booking a hotel for tonight; home security with a patrol
// robot, MCP tools, a drone and a takeover; a team of agents moving a festival
// day because of a storm). Prints a timeline and a summary; exits 0 only if
// every scenario completed and every check held. `--json`: one JSON summary on stdout. `--only <name>`: one scenario.
import { parseArgs } from 'node:util'
import { runScenarios } from '../scenarios/lib/runner.js'

const { values } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    only: { type: 'string', multiple: true },
    help: { type: 'boolean', short: 'h', default: false }
  }
})
if (values.help) {
  console.log('usage: npm run demo [-- --json] [-- --only car-assistant|home-security|festival-move]')
  process.exit(0)
}

const summary = await runScenarios({
  only: values.only,
  print: values.json ? undefined : line => { console.log(line) }
})
if (values.json) {
  console.log(JSON.stringify({
    ok: summary.ok,
    duration: summary.duration,
    processes: summary.processes,
    scenarios: summary.scenarios.map(s => ({
      name: s.name, status: s.status, nodes: s.nodes, agents: s.agents, steps: s.steps, duration: s.duration,
      checks: s.checks, outcome: s.outcome, ...(s.error != null ? { error: s.error } : {})
    })),
    ...(summary.error != null ? { error: summary.error } : {})
  }))
} else {
  console.log('')
  console.log(`${summary.ok ? 'OK' : 'FAILED'}: ${summary.scenarios.filter(s => s.status === 'completed').length}/${summary.scenarios.length} scenarios completed, ${summary.processes} node processes, ${(summary.duration / 1000).toFixed(1)} s`)
}
process.exit(summary.ok ? 0 : 1)
