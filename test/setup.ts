// vitest setupFiles: install the Node 20 polyfills before any libp2p module
// is evaluated in a test worker.
import '../packages/transport/src/polyfill.js'
