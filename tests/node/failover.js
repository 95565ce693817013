// rabbitmq-stream-js-client through a leader kill; tests/cluster/test_clients_failover.py runs it,
// kills the leader when it prints "half", and checks the JSON report on its last line.
// Usage: node failover.js <host> <leader port> <replica port> <stream> <count>
//
// The publisher recovers the way the client documents: on a closed connection the application
// calls client.restart() (again until it succeeds), which reconnects to the same broker and
// declares the publisher again; what was not confirmed is sent again with the same publishing
// ids (the broker deduplicates by the publisher's reference).
"use strict"

const rabbit = require("rabbitmq-stream-js-client")

const [host, leaderPort, replicaPort, stream, countText] = process.argv.slice(2)
const N = Number(countText)
const step = (what) => process.stderr.write(`step: ${what}\n`)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function waitFor(cond, what, ms) {
  const started = Date.now()
  while (!cond()) {
    if (Date.now() - started > ms) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

async function main() {
  const report = { consumerClosed: false }
  let recovering = null
  let client = null
  const recover = () => {
    if (recovering === null) {
      recovering = (async () => {
        for (;;) {
          try {
            await client.restart()
            step("restarted")
            return
          } catch (e) {
            step(`restart failed: ${e.message}`)
          }
        }
      })().finally(() => { recovering = null })
    }
  }
  client = await rabbit.connect({
    hostname: host, port: Number(leaderPort), username: "guest", password: "guest", vhost: "/",
    heartbeat: 0, listeners: { connection_closed: () => recover() },
  })
  const reader = await rabbit.connect({
    hostname: host, port: Number(replicaPort), username: "guest", password: "guest", vhost: "/",
    heartbeat: 0,
  })
  const received = []
  await reader.declareConsumer({
    stream, offset: rabbit.Offset.first(),
    connectionClosedListener: () => { report.consumerClosed = true },
  }, (msg) => { received.push(msg.content.toString()) })
  step("consuming")

  const publisher = await client.declarePublisher({
    stream, publisherRef: "js-app", connectionClosedListener: () => recover(),
  })
  const confirmed = new Set()
  publisher.on("publish_confirm", (err, ids) => {
    if (err === null) for (const id of ids) confirmed.add(Number(id))
  })
  const send = (i) => publisher.send(Buffer.from(`js-${i}`), { publishingId: BigInt(i + 1) })
  for (let i = 0; i < N; i++) {
    try {
      await send(i)
    } catch (e) {
      step(`send ${i} failed: ${e.message}`)  // sent again below
    }
    if (i === Math.floor(N / 2)) {
      await publisher.flush()
      await waitFor(() => confirmed.size > N / 2, "half the confirms", 60000)
      process.stdout.write("half\n")
    }
  }
  // what the kill left unconfirmed goes again, same ids, until every message is confirmed
  const started = Date.now()
  while (confirmed.size < N) {
    if (Date.now() - started > 180000) throw new Error(`confirmed ${confirmed.size} of ${N}`)
    await sleep(2000)
    if (recovering !== null) continue
    for (let i = 0; i < N; i++) {
      if (!confirmed.has(i + 1)) {
        try { await send(i) } catch (e) { break }
      }
    }
    try { await publisher.flush() } catch (e) { /* the next round */ }
  }
  report.confirmed = confirmed.size
  step("confirmed")
  await waitFor(() => received.length >= N, "the replica's consumer", 60000)
  await sleep(500)  // a duplicate would follow the last message at once
  report.received = received.length
  report.once = new Set(received).size === received.length
  report.inOrder = received.every((body, i) => body === `js-${i}`)
  process.stdout.write(JSON.stringify(report) + "\n")
  process.exit(0)
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: String(e && e.stack || e) }) + "\n")
  process.exit(1)
})
