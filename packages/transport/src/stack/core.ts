// The modules every node needs: one entry point of the stack bundle (scripts/bundle-stack.js)
export { createLibp2p } from 'libp2p'
export { noise } from '@chainsafe/libp2p-noise'
export { yamux } from '@chainsafe/libp2p-yamux'
export { bootstrap } from '@libp2p/bootstrap'
export { identify } from '@libp2p/identify'
export { kadDHT, passthroughMapper, removePrivateAddressesMapper } from '@libp2p/kad-dht'
export { ping } from '@libp2p/ping'
