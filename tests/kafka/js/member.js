// One member of a consumer group, until its standard input closes: node member.js '{"brokers": [...],
// "topic": "t", "groupId": "g", "clientId": "a"}'. Prints one JSON line per event: {"event": "join",
// "memberId", "leaderId", "generation", "assignment": [partitions]} after each rebalance, {"event":
// "record", "partition", "offset", "key", "value"} per record, {"event": "commit", "offsets"} per
// commit, then {"event": "stopped"} once it has left the group (disconnect commits and leaves).
'use strict'

const { client, args, out, failure } = require('./common')

async function run ({ brokers, topic, groupId, clientId, fromBeginning = true }) {
  const consumer = client(brokers, clientId).consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 20000,
    heartbeatInterval: 300,
    maxWaitTimeInMs: 200,
  })
  const { GROUP_JOIN, COMMIT_OFFSETS, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, ({ payload }) => out({
    event: 'join',
    memberId: payload.memberId,
    leaderId: payload.leaderId,
    generation: payload.groupGenerationId,
    assignment: (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b),
  }))
  consumer.on(COMMIT_OFFSETS, ({ payload }) => out({
    event: 'commit',
    offsets: payload.topics.flatMap(t => t.partitions.map(p => ({ partition: p.partition, offset: Number(p.offset) }))),
  }))
  consumer.on(CRASH, ({ payload }) => out({ event: 'crash', error: failure(payload.error) }))

  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning })
  await consumer.run({
    // autoCommit: after each batch (no interval or threshold), as KafkaJS does by default
    eachMessage: async ({ partition, message }) => out({
      event: 'record',
      partition,
      offset: Number(message.offset),
      key: message.key === null ? null : message.key.toString(),
      value: message.value === null ? null : message.value.toString(),
    }),
  })
  out({ event: 'running' })

  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    await consumer.disconnect()
    out({ event: 'stopped' })
  }
  process.stdin.on('end', () => stop().catch(e => { out({ event: 'error', error: failure(e) }); process.exitCode = 1 }))
  process.stdin.resume()
}

run(args()).catch(e => { out({ event: 'error', error: failure(e) }); process.exitCode = 1 })
