/**
 * @packageDocumentation
 *
 * The assembled Internet of Agents node: {@link createIoaNode} stacks the
 * transport, interconnect and collaboration layers on one libp2p node, with
 * persistent state in a data directory, custom layers on top, and a validated
 * JSON config file ({@link startFromConfig}) whose agents are JavaScript
 * modules or external programs speaking the local agent protocol.
 */
import '@ioa/transport/polyfill'

export { createIoaNode, initFromConfig, LayerError } from './ioa-node.js'
export { DataDirError, DataDirLockedError, DataDirCorruptError, DataDirUnavailableError, IdentityMissingError } from './errors.js'
export type { IoaNode, IoaNodeInit, HostAgentOptions, IoaLayer, NodeEvents, NodeTaskEvent, IoaGateway, IoaGatewayInit } from './ioa-node.js'
export { loadConfig, parseConfig, resolvePaths, ConfigError, NodeConfigSchema, MAX_TIMER_MS } from './config.js'
export type { NodeConfig, AgentConfig, GatewayConfig, TasksConfig, LoadConfigOptions } from './config.js'
// the management plane (spec/management.md 2): its options and what a running node exposes
export type { IoaManagement, IoaManagementInit } from './management.js'
export { startFromConfig } from './start.js'
export { DOMAIN_PSK_ENV, DOMAIN_PSK_FILE_ENV } from './domain-key.js'
export type { DomainKeyOptions } from './domain-key.js'
export { openKeyStore, listKeys, changePassphrase, EncryptedKeyStore, KeyStoreError, KEYSTORE_DEFAULTS } from './keystore.js'
export type { KeyStoreInit, KeyStoreStatus, OpenKeyStoreOptions, ChangePassphraseOptions, KeyStoreListing } from './keystore.js'
export { keyStoreFromConfig, passphraseFromEnv, readPassphraseFile, PASSPHRASE_ENV, PASSPHRASE_FILE_ENV } from './passphrase.js'
export type { KeyStoreSource } from './passphrase.js'
export type {
  AgentModule, AgentModuleContext, AgentImplementation, NodeLogEvent, StartFromConfigOptions, RunningAgent, StartedNode
} from './start.js'
export {
  startExternalAgent, AGENT_PROTOCOL, EXTERNAL_AGENT_DEFAULTS, ExternalAgentError, AgentStartError, AgentStartTimeoutError,
  UnsupportedProtocolError, SkillMismatchError, AgentProtocolError, LineTooLongError, AgentExitedError, TooManyTasksError, AgentTaskError
} from './external-agent.js'
export type { ExternalAgent, ExternalAgentComponents, ExternalAgentInit } from './external-agent.js'
export { readKeyFile, parseKeyFile } from './cli/keyfile.js'
export type { KeyFile } from './cli/keyfile.js'
