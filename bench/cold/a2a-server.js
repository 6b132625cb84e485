// The A2A side of the cold-start benchmark (bench/cold.js): an agent served
// with the official @a2a-js/sdk server pieces on express (JSON-RPC binding,
// the agent card at the well-known path), answering every message with its
// text. Started by the bench as its own process; prints `{"url": ...}` on
// stdout once it listens, and exits when its stdin closes.
import { AGENT_CARD_PATH, Role } from '@a2a-js/sdk'
import { DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server'
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express'
import express from 'express'

const app = express()
const server = app.listen(0, '127.0.0.1', () => {
  const { port } = server.address()
  const url = `http://127.0.0.1:${port}`
  const card = {
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
  const executor = {
    async execute (ctx, bus) {
      const text = ctx.userMessage.parts.map(p => p.content?.$case === 'text' ? p.content.value : '').join('')
      bus.publish({
        kind: 'message',
        data: {
          messageId: `${ctx.userMessage.messageId}-answer`,
          contextId: ctx.contextId,
          taskId: '',
          role: Role.ROLE_AGENT,
          parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
          metadata: undefined,
          extensions: [],
          referenceTaskIds: []
        }
      })
      bus.finished()
    },
    async cancelTask () {}
  }
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor)
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }))
  app.use('/a2a/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }))
  process.stdout.write(JSON.stringify({ url }) + '\n')
})
process.stdin.resume()
process.stdin.on('end', () => { server.close(); process.exit(0) })
