// The home server's MCP client of the camera service: one MCP server child
// process (camera-mcp-server.js, stdio transport) for the agent's lifetime,
// started again once if it went away.
import { HOME_DIR, HomeSecurityError } from './shared.js'

/** Longest MCP server start (spawn, initialize, tools/list), ms */
const CONNECT_TIMEOUT = 10_000
/** stderr lines of the MCP server kept for error messages */
const STDERR_TAIL = 5

export class CameraTools {
  /**
   * @param {{ script: string, args?: string[] }} init the MCP server script (absolute) and its arguments
   */
  constructor ({ script, args = [] }) {
    this.script = script
    this.args = args
    this.client = undefined
    this.connecting = undefined
    this.stderr = []
    this.tools = []
    this.pid = null
    this.closed = false
  }

  /** Start the MCP server and list its tools (idempotent while connected) */
  async connect (signal) {
    if (this.closed) throw new HomeSecurityError('TOOLS_CLOSED', 'The camera tools are closed')
    if (this.client != null) return this.tools
    this.connecting ??= this.doConnect(signal).finally(() => { this.connecting = undefined })
    return await this.connecting
  }

  async doConnect (signal) {
    // the SDK is loaded when first needed, not while the node starts
    const [{ Client }, { StdioClientTransport }] = await Promise.all([
      import('@modelcontextprotocol/sdk/client/index.js'),
      import('@modelcontextprotocol/sdk/client/stdio.js')
    ])
    const transport = new StdioClientTransport({ command: process.execPath, args: [this.script, ...this.args], cwd: HOME_DIR, stderr: 'pipe' })
    transport.stderr?.on('data', chunk => {
      this.stderr.push(String(chunk).trim().slice(0, 200))
      if (this.stderr.length > STDERR_TAIL) this.stderr.shift()
    })
    const client = new Client({ name: 'home-server', version: '1.0.0' })
    const opts = { signal: signal ?? AbortSignal.timeout(CONNECT_TIMEOUT), timeout: CONNECT_TIMEOUT }
    try {
      await client.connect(transport, opts)
      const { tools } = await client.listTools(undefined, opts)
      this.tools = tools.map(t => t.name)
    } catch (err) {
      await client.close().catch(() => {})
      throw new HomeSecurityError('TOOLS_UNAVAILABLE', `The camera MCP server did not start: ${err?.message ?? err}${this.stderrTail()}`)
    }
    client.onclose = () => {
      if (this.client === client) this.client = undefined
    }
    this.client = client
    this.pid = transport.pid
    if (this.closed) {
      await this.close()
      throw new HomeSecurityError('TOOLS_CLOSED', 'The camera tools are closed')
    }
    return this.tools
  }

  stderrTail () {
    return this.stderr.length > 0 ? ` (stderr: ${this.stderr.join(' | ')})` : ''
  }

  /**
   * Call a tool; its structured result, or HomeSecurityError TOOL_FAILED
   * (the tool reported an error) / TOOLS_UNAVAILABLE (no server).
   */
  async call (name, args, { signal, timeout = 3_000 } = {}) {
    await this.connect(signal)
    let result
    try {
      result = await this.client.callTool({ name, arguments: args }, undefined, { signal, timeout })
    } catch (err) {
      throw new HomeSecurityError('TOOLS_UNAVAILABLE', `MCP ${name} failed: ${err?.message ?? err}`)
    }
    if (result.isError === true) {
      const text = result.content?.find(c => c.type === 'text')?.text ?? 'tool error'
      throw new HomeSecurityError('TOOL_FAILED', `MCP ${name}: ${String(text).slice(0, 300)}`)
    }
    if (result.structuredContent == null) throw new HomeSecurityError('TOOL_FAILED', `MCP ${name} returned no structured content`)
    return result.structuredContent
  }

  /** Stop the MCP server process */
  async close () {
    this.closed = true
    const client = this.client
    this.client = undefined
    await client?.close().catch(() => {})
  }
}
