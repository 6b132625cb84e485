/**
 * The A2A side of the benchmarks (bench/cold/a2a-server.js, the `a2a` path of
 * bench/task.js): an echo agent served with the official @a2a-js/sdk server
 * pieces on express: `DefaultRequestHandler` with an `InMemoryTaskStore`, the
 * JSON-RPC binding at /a2a/jsonrpc and the agent card at the well-known path.
 * The executor answers every message with its text, either as one message
 * (`reply: 'message'`) or as one completed Task whose artifact holds the text
 * (`reply: 'task'`).
 */
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk'
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server'
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express'
import express from 'express'

/** A text part as the SDK's v1.0 types spell it */
function textPart (text) {
  return { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' }
}

function agentCard (url) {
  return {
    name: 'Bench echo',
    description: 'Answers every message with its text',
    supportedInterfaces: [{ url: `${url}/a2a/jsonrpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' }],
    provider: undefined,
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'bench.echo', name: 'echo', description: 'echo', tags: ['bench'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: []
  }
}

function echoExecutor (reply) {
  return {
    async execute (ctx, bus) {
      const text = ctx.userMessage.parts.map(p => p.content?.$case === 'text' ? p.content.value : '').join('')
      if (reply === 'task') {
        bus.publish(AgentEvent.task({
          id: ctx.taskId,
          contextId: ctx.contextId,
          status: { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: new Date().toISOString() },
          artifacts: [{ artifactId: 'echo', name: 'echo', description: '', parts: [textPart(text)], metadata: undefined, extensions: [] }],
          history: [],
          metadata: undefined
        }))
      } else {
        bus.publish(AgentEvent.message({
          messageId: `${ctx.userMessage.messageId}-answer`,
          contextId: ctx.contextId,
          taskId: '',
          role: Role.ROLE_AGENT,
          parts: [textPart(text)],
          metadata: undefined,
          extensions: [],
          referenceTaskIds: []
        }))
      }
      bus.finished()
    },
    async cancelTask () {}
  }
}

/**
 * Serve the echo agent on 127.0.0.1 (a free port); resolves with its base
 * `url` and `close()`
 */
export async function startA2AAgent ({ reply = 'message' } = {}) {
  const app = express()
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve, reject) => {
    server.once('listening', resolve)
    server.once('error', reject)
  })
  const url = `http://127.0.0.1:${server.address().port}`
  const handler = new DefaultRequestHandler(agentCard(url), new InMemoryTaskStore(), echoExecutor(reply))
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }))
  app.use('/a2a/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }))
  return {
    url,
    close: () => new Promise(resolve => {
      server.closeAllConnections()
      server.close(() => { resolve() })
    })
  }
}
