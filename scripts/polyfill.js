// Loaded with `node --import ./scripts/polyfill.js` by the repository's own
// entry points (bench, demo). Packages ship the same code as
// `@ioa/transport/polyfill`; this file only forwards to the built copy.
import '@ioa/transport/polyfill'
