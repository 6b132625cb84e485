// The management dashboard (spec/management.md 2.6). Bundled at build time
// by packages/management/scripts/bundle.js into dist/dashboard/; never
// imported by a node. It reads the node's data API with the session cookie
// the login URL set: the topology (polled), the timeline (long-poll), and
// draws the charts from the timeline's task events.
import cytoscape from 'cytoscape'
import uPlot from 'uplot'
import './style.css'

const TOPOLOGY_EVERY = 3000
const WAIT = 20000
const MAX_ROWS = 300
const BUCKET = 10000
const BUCKETS = 30

const $ = (sel) => document.querySelector(sel)
const short = (id) => id == null ? '' : id.length > 20 ? `${id.slice(0, 12)}…${id.slice(-6)}` : id

function status (text, bad = false) {
  const el = $('#status')
  el.textContent = text
  el.classList.toggle('bad', bad)
}

async function api (path) {
  const res = await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } })
  if (res.status === 401) throw new Error('not logged in: open the login URL that `ioa start` printed')
  if (!res.ok) {
    const body = await res.json().catch(() => ({}))
    throw new Error(`${path}: ${res.status} ${body.error?.code ?? ''}`)
  }
  return res.json()
}

function cell (row, content, cls) {
  const td = document.createElement('td')
  if (cls != null) td.className = cls
  if (content instanceof Node) td.append(content)
  else td.textContent = content
  row.append(td)
  return td
}

// ---- topology: graph and tables

const cy = cytoscape({
  container: $('#graph'),
  wheelSensitivity: 0.3,
  style: [
    { selector: 'node', style: { label: 'data(label)', 'font-size': 11, 'min-zoomed-font-size': 6, color: '#1d2430', 'text-valign': 'bottom', 'text-margin-y': 3, width: 22, height: 22 } },
    { selector: 'node.domain', style: { 'background-color': '#eef1f5', 'background-opacity': 0.6, 'border-width': 1, 'border-color': '#c5ccd6', shape: 'round-rectangle', 'text-valign': 'top', 'font-size': 12, 'font-weight': 600, color: '#6b7686' } },
    { selector: 'node.node', style: { 'background-color': '#2f6fdf', shape: 'ellipse' } },
    { selector: 'node.gateway', style: { 'background-color': '#d9822b', shape: 'diamond', width: 28, height: 28 } },
    { selector: 'node.peer', style: { 'background-color': '#a3acb9', width: 14, height: 14 } },
    { selector: 'node.agent', style: { 'background-color': '#1f9d6b', shape: 'round-rectangle', width: 16, height: 16, 'font-size': 9 } },
    { selector: 'edge', style: { width: 1.5, 'line-color': '#9aa6b6', 'curve-style': 'bezier' } },
    { selector: 'edge.gateway', style: { 'line-color': '#d9822b', 'line-style': 'dashed', width: 2 } },
    { selector: 'edge.hosts', style: { 'line-color': '#8fd1b5', width: 1 } }
  ]
})

let shape = ''

function drawGraph (t) {
  const els = []
  const peers = new Set(t.nodes.map(n => n.peer))
  const inner = new Map(t.gateways.map(g => [g.inner, g]))
  for (const d of t.domains) els.push({ data: { id: `domain:${d.name}`, label: d.name }, classes: 'domain' })
  for (const n of t.nodes) {
    els.push({ data: { id: n.peer, did: n.did, label: short(n.did.replace(/^did:key:/, '')), parent: `domain:${n.domain}` }, classes: n.gateway != null ? 'gateway' : 'node' })
  }
  for (const a of t.agents) {
    const host = t.nodes.find(n => n.did === a.node)
    if (host == null) continue
    els.push({ data: { id: `agent:${a.did}`, did: a.did, label: a.name, parent: `domain:${host.domain}` }, classes: 'agent' })
    els.push({ data: { id: `hosts:${a.did}`, source: host.peer, target: `agent:${a.did}` }, classes: 'hosts' })
  }
  for (const l of t.links) {
    for (const p of [l.a, l.b]) {
      if (peers.has(p)) continue
      peers.add(p)
      const g = inner.get(p)
      els.push({ data: { id: p, label: g != null ? `${g.domain} (inside)` : short(p), ...(g != null ? { parent: `domain:${g.domain}` } : {}) }, classes: 'peer' })
    }
    els.push({ data: { id: `${l.kind}:${l.a}:${l.b}`, source: l.a, target: l.b }, classes: l.kind })
  }
  const next = els.map(e => e.data.id).sort().join(' ')
  if (next === shape) return
  shape = next
  cy.elements().remove()
  cy.add(els)
  cy.layout({ name: 'cose', animate: false, padding: 16, randomize: true, nodeRepulsion: () => 60000, idealEdgeLength: (e) => e.hasClass('hosts') ? 30 : 110, nestingFactor: 0.8, gravity: 0.4, componentSpacing: 60, numIter: 1500 }).run()
}

function drawTables (t) {
  const nodes = $('#nodes tbody')
  nodes.replaceChildren(...t.nodes.map(n => {
    const tr = document.createElement('tr')
    tr.dataset.did = n.did
    cell(tr, short(n.did), 'id').title = `${n.did}, peer ${n.peer}`
    cell(tr, n.domain)
    cell(tr, n.gateway != null ? `${n.role}, gateway to ${n.gateway.domain}` : n.role)
    cell(tr, String(n.agents.length))
    cell(tr, `${n.tasks.completed} / ${n.tasks.failed + n.tasks.canceled} / ${n.tasks.refused}`)
    return tr
  }))
  const agents = $('#agents tbody')
  agents.replaceChildren(...t.agents.map(a => {
    const tr = document.createElement('tr')
    tr.dataset.did = a.did
    const name = cell(tr, a.name)
    name.title = a.did
    const skills = document.createElement('span')
    for (const s of a.skills) {
      const b = document.createElement('span')
      b.className = 'skill'
      b.textContent = s
      skills.append(b)
    }
    cell(tr, skills)
    cell(tr, short(a.node), 'id').title = a.node
    return tr
  }))
  const orphans = t.capabilities.length
  $('#topology-source').textContent = `${t.nodes.length} node(s), ${t.agents.length} agent(s), ${orphans} capabilit${orphans === 1 ? 'y' : 'ies'}`
}

async function pollTopology () {
  for (;;) {
    try {
      const { source, topology } = await api('/api/v1/topology')
      drawGraph(topology)
      drawTables(topology)
      $('#topology-source').textContent += source === 'agent' ? ' — from the management agent' : ' — this node only (not a management agent)'
    } catch (err) {
      status(String(err.message ?? err), true)
    }
    await new Promise(resolve => setTimeout(resolve, TOPOLOGY_EVERY))
  }
}

// ---- timeline and charts

const buckets = new Map() // bucket start -> { completed, failed, refused, latency: Map<skill, [sum, n]> }
const skills = new Set()

function count (e) {
  if (e.kind !== 'task' || e.type === 'started' || e.type === 'working') return
  const start = Math.floor(e.at / BUCKET) * BUCKET
  const b = buckets.get(start) ?? { completed: 0, failed: 0, refused: 0, latency: new Map() }
  buckets.set(start, b)
  if (e.type === 'completed') b.completed++
  else if (e.type === 'refused' || e.type === 'rejected' || e.type === 'error') b.refused++
  else b.failed++
  if (e.duration != null && e.skill != null) {
    skills.add(e.skill)
    const l = b.latency.get(e.skill) ?? [0, 0]
    l[0] += e.duration
    l[1]++
    b.latency.set(e.skill, l)
  }
}

function describe (e) {
  if (e.kind === 'conversation') return [`${e.type}`, `team ${short(e.team)} from ${short(e.from)}`]
  const parts = [e.side === 'client' ? `asked ${e.skill}` : e.skill ?? '(unparsed request)']
  if (e.duration != null) parts.push(`${Math.round(e.duration)} ms`)
  if (e.code != null) parts.push(e.code)
  if (e.taskId != null) parts.push(`task ${short(e.taskId)}`)
  return [e.type, parts.join(' · ')]
}

function addRows (events) {
  const list = $('#timeline')
  for (const e of events) {
    const li = document.createElement('li')
    li.className = `${e.kind} ${e.side ?? ''} ${e.type}`
    if (e.taskId != null) li.dataset.task = e.taskId
    const [what, detail] = describe(e)
    const t = document.createElement('span')
    t.className = 't'
    t.textContent = new Date(e.at).toLocaleTimeString()
    const ev = document.createElement('span')
    ev.className = 'ev'
    ev.textContent = what
    const d = document.createElement('span')
    d.textContent = detail
    li.append(t, ev, d)
    list.prepend(li)
  }
  while (list.children.length > MAX_ROWS) list.lastElementChild.remove()
}

const size = (el) => ({ width: Math.max(300, el.clientWidth), height: 160 })
let rates
let latency
let latencySkills = ''

function drawCharts () {
  const now = Math.floor(Date.now() / BUCKET) * BUCKET
  const xs = []
  for (let i = BUCKETS - 1; i >= 0; i--) xs.push((now - i * BUCKET) / 1000)
  const at = (x) => buckets.get(x * 1000)
  const ratesData = [xs, xs.map(x => at(x)?.completed ?? 0), xs.map(x => at(x)?.failed ?? 0), xs.map(x => at(x)?.refused ?? 0)]
  const el = $('#chart-rates')
  if (rates == null) {
    rates = new uPlot({
      ...size(el),
      series: [{}, { label: 'completed', stroke: '#1f9d6b', width: 2 }, { label: 'failed', stroke: '#c7382f', width: 2 }, { label: 'refused / error', stroke: '#d9822b', width: 2 }],
      axes: [{}, { label: 'tasks' }]
    }, ratesData, el)
  } else rates.setData(ratesData)

  const names = [...skills].sort()
  const latencyData = [xs, ...names.map(s => xs.map(x => {
    const l = at(x)?.latency.get(s)
    return l != null ? l[0] / l[1] : null
  }))]
  const lel = $('#chart-latency')
  if (latency == null || latencySkills !== names.join(' ')) {
    latency?.destroy()
    latencySkills = names.join(' ')
    const palette = ['#2f6fdf', '#1f9d6b', '#d9822b', '#7a4bc4', '#c7382f', '#178b99']
    latency = new uPlot({
      ...size(lel),
      series: [{}, ...names.map((s, i) => ({ label: s, stroke: palette[i % palette.length], width: 2, spanGaps: false, points: { show: true } }))],
      axes: [{}, { label: 'ms' }]
    }, latencyData, lel)
  } else latency.setData(latencyData)
  for (const old of buckets.keys()) if (old < now - BUCKETS * BUCKET) buckets.delete(old)
}

async function pollTimeline () {
  let after = 0
  let first = true
  for (;;) {
    try {
      const { seq, events } = await api(`/api/v1/timeline?after=${after}&wait=${first ? 0 : WAIT}`)
      if (seq < after) after = 0 // the node restarted: its numbers start again
      for (const e of events) count(e)
      addRows(events)
      if (events.length > 0) {
        after = events[events.length - 1].seq
        drawCharts()
      } else if (seq < after || first) after = seq
      first = false
      status(`live · ${new Date().toLocaleTimeString()}`)
    } catch (err) {
      status(String(err.message ?? err), true)
      await new Promise(resolve => setTimeout(resolve, 3000))
    }
  }
}

drawCharts()
setInterval(drawCharts, BUCKET)
window.ioaDashboard = { cy }
void pollTopology()
void pollTimeline()
