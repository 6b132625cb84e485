#!/usr/bin/env node
// The home's camera service as an MCP server (Model Context Protocol, stdio
// transport): the home server agent starts it as a child process and calls
// its tools to confirm what a patrol robot reports.
//
// Tools:
//   analyze_frame({ frameId, threshold? })  -> verdict of one camera frame
//   get_camera_status({ camera })           -> whether a camera is online, its latest frame
//
// Verdicts are computed deterministically from data/frames.json (see
// camera-analysis.js). Argument: an optional path to another frames file.
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js'
import { z } from 'zod'
import { analyzeFrame, cameraStatus, loadFrames, CAMERA_ID, FRAME_ID } from './camera-analysis.js'

const data = loadFrames(process.argv[2])

const server = new McpServer({ name: 'home-cameras', version: '1.0.0' })

const detection = z.object({ label: z.string(), class: z.enum(['person', 'animal', 'object']), score: z.number() })

server.registerTool('analyze_frame', {
  title: 'Analyse a camera frame',
  description: 'Classify what a patrol robot camera frame shows (person, animal, clear) with a score, and whether it is an intruder',
  inputSchema: {
    frameId: z.string().regex(FRAME_ID).describe('Frame id, e.g. r1-000216'),
    threshold: z.number().gt(0).max(1).optional().describe('Score at or above which a person is an intruder (default 0.8)')
  },
  outputSchema: {
    frameId: z.string(),
    camera: z.string(),
    capturedAt: z.string(),
    quality: z.number(),
    verdict: z.enum(['person', 'animal', 'clear']),
    label: z.string().nullable(),
    confidence: z.number(),
    intruder: z.boolean(),
    threshold: z.number(),
    reason: z.string(),
    detections: z.array(detection).max(64)
  },
  annotations: { readOnlyHint: true, idempotentHint: true }
}, async ({ frameId, threshold }) => {
  try {
    const result = analyzeFrame(data, frameId, threshold != null ? { threshold } : {})
    return { content: [{ type: 'text', text: `${frameId}: ${result.verdict} (${result.reason})` }], structuredContent: result }
  } catch (err) {
    return { isError: true, content: [{ type: 'text', text: `${err?.code ?? 'ERROR'}: ${err?.message ?? err}` }] }
  }
})

server.registerTool('get_camera_status', {
  title: 'Camera status',
  description: 'Whether a robot camera is online, its model and its latest frame',
  inputSchema: { camera: z.string().regex(CAMERA_ID).describe('Camera id, e.g. r1-front') },
  outputSchema: {
    camera: z.string(),
    online: z.boolean(),
    robot: z.string().nullable(),
    model: z.string().nullable(),
    ir: z.boolean(),
    resolution: z.array(z.number()).nullable(),
    frames: z.number(),
    latestFrame: z.string().nullable(),
    latestAt: z.string().nullable()
  },
  annotations: { readOnlyHint: true }
}, async ({ camera }) => {
  try {
    const status = cameraStatus(data, camera)
    return { content: [{ type: 'text', text: `${camera}: online, latest frame ${status.latestFrame}` }], structuredContent: status }
  } catch (err) {
    return { isError: true, content: [{ type: 'text', text: `${err?.code ?? 'ERROR'}: ${err?.message ?? err}` }] }
  }
})

await server.connect(new StdioServerTransport())
// the client went away (its process ended): so do we
process.stdin.on('close', () => { process.exit(0) })
