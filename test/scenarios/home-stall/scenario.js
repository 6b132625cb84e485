// The home-security scenario with the standby robot R2 kept from running for
// 1.5 s right after it starts its takeover patrol (SIGSTOP, then SIGCONT): what
// the scheduler of a loaded 2-core machine did to R2 when the demo was flaky
// (1494 ms waiting in the run queue, from /proc/<pid>/schedstat). A lease must
// outlast that: R2 keeps its patrol and the site its coverage.
import home, { reachable } from '../../../scenarios/home/scenario.js'

/** How long R2 is held, ms */
const STALL_MS = 1_500

export default {
  ...home,
  async run (ctx) {
    const r2 = ctx.node('robot-2')
    r2.waitForEvent(e => e.event === 'patrol-started' && e.data?.takeover != null, 60_000, 'R2 taking over').then(() => {
      r2.kill('SIGSTOP')
      ctx.timeline('test', `R2 held for ${STALL_MS} ms`)
      setTimeout(() => {
        r2.kill('SIGCONT')
        ctx.timeline('test', 'R2 runs again')
      }, STALL_MS)
    }, () => {
      // no takeover: the checks below say so
    })
    // the server's card found before the story starts (its own wait is shorter)
    await reachable(ctx.driver.node, ctx.node('home-server').did('server'), ctx.signal, 30_000).catch(() => {})
    return await home.run(ctx)
  }
}
