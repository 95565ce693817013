// Reads a stream from its first offset with rabbitmq-stream-js-client and prints, as JSON on its
// last line, what the client handed over for each message (offset, content as hex) and any
// error it raised (after one it listens GRACE_MS more). tests/broker/test_cross_protocol_node.py
// writes the stream through MEGA and RSIO first.
// Usage: node read_stream.js <host> <port> <stream> <count> [<ms to wait at most>]
"use strict"

const rabbit = require("rabbitmq-stream-js-client")

const [host, portText, stream, countText, waitText] = process.argv.slice(2)
const count = Number(countText)
const waitMs = Number(waitText || 15000)

const report = { messages: [], errors: [] }
// exit once the report is written: a pipe takes a long line in several writes
const done = (code) => process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(code))
// The client decodes a Deliver inside its socket's data handler: a record it cannot decode
// throws there, not into the consumer's callback (without this handler the process exits).
let erredAt = 0
process.on("uncaughtException", (err) => {
  report.errors.push(String(err && err.message || err))
  erredAt = erredAt || Date.now()
})
// how long to go on listening after an error, to see whether anything else comes
const GRACE_MS = 2000

async function main() {
  const client = await rabbit.connect({
    hostname: host, port: Number(portText), username: "guest", password: "guest", vhost: "/",
    heartbeat: 0,
  })
  await client.declareConsumer({ stream, offset: rabbit.Offset.first() }, (msg) => {
    report.messages.push({ offset: Number(msg.offset), content: msg.content.toString("hex") })
  })
  const started = Date.now()
  while (report.messages.length < count && Date.now() - started < waitMs
         && !(erredAt && Date.now() - erredAt > GRACE_MS)) {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  await client.close().catch(() => {})
}

main().then(() => done(0)).catch((err) => {
  report.errors.push(String(err && err.stack || err))
  done(1)
})
