// The TCP transport: one entry point of the stack bundle (scripts/bundle-stack.js)
export { tcp } from '@libp2p/tcp'
