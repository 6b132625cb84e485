// The gossipsub router: one entry point of the stack bundle (scripts/bundle-stack.js)
export { gossipsub } from '@libp2p/gossipsub'
