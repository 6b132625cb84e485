/**
 * The client side of the A2A benchmarks (bench/cold/a2a-client.js, the `a2a`
 * path of bench/task.js): the official @a2a-js/sdk client made by
 * `ClientFactory` from the agent card's URL, sending blocking SendMessage
 * requests (the answer comes once the task is terminal).
 */
import { Role } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'

/** A user message of one text part */
function userMessage (messageId, text) {
  return {
    messageId,
    contextId: '',
    taskId: '',
    role: Role.ROLE_USER,
    parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: []
  }
}

/** The text of an answer: a message's parts, or a Task's first artifact */
function answerText (answer) {
  const parts = answer?.parts ?? answer?.artifacts?.[0]?.parts ?? []
  return parts.map(p => p.content?.$case === 'text' ? p.content.value : '').join('')
}

/**
 * Fetch the agent card at `url` and make a client; `send(messageId, text)`
 * sends one blocking SendMessage and resolves with the answer's text
 */
export async function a2aCaller (url) {
  const client = await new ClientFactory().createFromUrl(url)
  return {
    async send (messageId, text) {
      const answer = await client.sendMessage({ tenant: '', message: userMessage(messageId, text), configuration: undefined, metadata: undefined })
      return answerText(answer)
    }
  }
}
