// The in-memory transport: one entry point of the stack bundle (scripts/bundle-stack.js)
export { memory } from '@libp2p/memory'
