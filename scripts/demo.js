// `npm run demo`: the scenarios across separate OS processes on 127.0.0.1
// (the car assistant booking a hotel for tonight; home security with a patrol
// robot, MCP tools, a drone and a takeover; a team of agents moving a festival
// day because of a storm). Prints a timeline and a summary; exits 0 only if
// every scenario completed and every check held. `--json`: one JSON summary on stdout. `--only <name>`: one scenario.
// The phone (the driver node) serves the management dashboard: the demo prints its one-time login URL;
// `--keep`: the nodes still running and the dashboard stay up after the scenarios, until Ctrl-C.
import { parseArgs } from 'node:util'
import { runScenarios } from '../scenarios/lib/runner.js'

const { values } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    only: { type: 'string', multiple: true },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false }
  }
})
if (values.help) {
  console.log('usage: npm run demo [-- --json] [-- --only car-assistant|home-security|festival-move] [-- --keep]')
  console.log('  --keep  keep the nodes and the dashboard up after the scenarios, until Ctrl-C')
  process.exit(0)
}

// with --keep, Ctrl-C ends the wait (the node processes get it too and stop; the runner stops the rest)
const keep = values.keep ? new Promise(resolve => { process.once('SIGINT', resolve) }) : undefined
const summary = await runScenarios({
  only: values.only,
  dashboard: true,
  keep,
  onDashboard: url => {
    const say = `Dashboard (open once; the link holds the operator's token): ${url}`
    if (values.json) console.error(say)
    else console.log(say)
  },
  print: values.json ? undefined : line => { console.log(line) }
})
if (values.json) {
  console.log(JSON.stringify({
    ok: summary.ok,
    dashboard: summary.dashboard ?? null,
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
