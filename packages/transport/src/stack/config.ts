// The loader of a node's own key (with the keychain it brings): one entry point of the stack bundle (scripts/bundle-stack.js)
export { loadOrCreateSelfKey } from '@libp2p/config'
