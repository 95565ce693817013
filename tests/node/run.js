// Drives rabbitmq-stream-js-client against a streamlet broker; tests/node/test_node_client.py runs
// it and checks the JSON report it prints on its last line.
// Usage: node run.js <host> <port> <prefix>
"use strict"

const rabbit = require("rabbitmq-stream-js-client")

const [host, portText, prefix] = process.argv.slice(2)
const port = Number(portText)
const N = 500

function waitFor(cond, what, ms = 20000) {
  return new Promise((resolve, reject) => {
    const started = Date.now()
    const tick = () => {
      if (cond()) return resolve()
      if (Date.now() - started > ms) return reject(new Error(`timed out waiting for ${what}`))
      setTimeout(tick, 20)
    }
    tick()
  })
}

const step = (what) => process.stderr.write(`step: ${what}\n`)  // shown when the test fails

async function main() {
  const report = {}
  // connect: PeerProperties, SASL, Tune, Open, then (always) ExchangeCommandVersions
  const client = await rabbit.connect({
    hostname: host, port, username: "guest", password: "guest", vhost: "/", heartbeat: 0,
  })
  report.connected = true
  step("connected")

  // a stream: publish, consume from the first offset
  const stream = `${prefix}-stream`
  await client.createStream({ stream, arguments: { "max-age": "1h" } })
  const publisher = await client.declarePublisher({ stream, publisherRef: `${prefix}-writer` })
  for (let i = 0; i < N; i++) await publisher.send(Buffer.from(`node-${i}`))
  await publisher.flush()
  step("published")
  const got = []
  const consumer = await client.declareConsumer({ stream, offset: rabbit.Offset.first() }, (msg) => {
    got.push(msg.content.toString())
  })
  await waitFor(() => got.length >= N, "the stream's messages")
  report.consumed = got.length
  step("consumed")
  report.inOrder = got.every((body, i) => body === `node-${i}`)
  await client.closeConsumer(consumer.extendedId)
  await publisher.close()
  const stats = await client.streamStatsRequest(stream)
  report.lastChunkId = Number(stats.lastChunkId)
  step("stats")

  // a super stream: create (3 partitions), publish by routing key, consume every partition
  const superStream = `${prefix}-super`
  await client.createSuperStream({ streamName: superStream }, undefined, 3)
  step("super stream created")
  const ssPublisher = await client.declareSuperStreamPublisher(
    { superStream }, (content, opts) => opts.messageProperties.messageId)
  step("super stream publisher")
  const M = 60
  for (let i = 0; i < M; i++) {
    await ssPublisher.send(Buffer.from(`ss-${i}`), { messageProperties: { messageId: `${i}` } })
  }
  const ssGot = []
  const ssConsumer = await client.declareSuperStreamConsumer(
    { superStream, offset: rabbit.Offset.first() }, (msg) => { ssGot.push(msg.content.toString()) })
  await waitFor(() => ssGot.length >= M, "the super stream's messages")
  report.superStreamConsumed = ssGot.length
  step("super stream consumed")
  report.superStreamAll = new Set(ssGot).size === M
  await ssConsumer.close()
  await ssPublisher.close()
  step("super stream consumer closed")
  await client.deleteSuperStream({ streamName: superStream })
  step("super stream deleted")
  await client.deleteStream({ stream })
  step("stream deleted")
  await client.close()
  console.log(JSON.stringify(report))
}

main().then(() => process.exit(0)).catch((err) => {
  console.log(JSON.stringify({ error: String(err && err.stack || err) }))
  process.exit(1)
})
