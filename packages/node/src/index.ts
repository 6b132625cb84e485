/**
 * @packageDocumentation
 *
 * The assembled Internet of Agents node: {@link createIoaNode} stacks the
 * transport, interconnect and collaboration layers on one libp2p node, with
 * persistent state in a data directory and a validated JSON config file.
 */
import '@ioa/transport/polyfill'

export { createIoaNode, initFromConfig } from './ioa-node.js'
export type { IoaNode, IoaNodeInit, HostAgentOptions } from './ioa-node.js'
export { loadConfig, parseConfig, ConfigError, NodeConfigSchema } from './config.js'
export type { NodeConfig, AgentConfig } from './config.js'
