// What every script here shares: its JSON argument, a KafkaJS client that logs to stderr, JSON out.
'use strict'

const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')

// KafkaJS itself knows gzip only; snappy comes from the kafkajs-snappy plugin (pure JS). lz4 and zstd
// plugins need native builds (node-gyp), which the tests do without.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec

function args () {
  if (process.argv.length < 3) throw new Error(`usage: node ${process.argv[1]} '<json>'`)
  return JSON.parse(process.argv[2])
}

function client (brokers, clientId) {
  return new Kafka({
    clientId,
    brokers,
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, label, log }) =>
      process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n'),
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
    requestTimeout: 30000,
    connectionTimeout: 10000,
  })
}

function out (value) {
  process.stdout.write(JSON.stringify(value) + '\n')
}

// An error as JSON, with its cause (KafkaJS's retrier wraps a protocol error, whose `type` names Kafka's
// error code, in a KafkaJSNonRetriableError that has none).
function failure (e) {
  const cause = e.cause && e.cause !== e ? failure(e.cause) : undefined
  const type = e.type || (cause && cause.type)
  return { name: e.name, type, code: e.code, message: e.message, retriable: e.retriable, cause }
}

// The script's one answer: { ok: true, ... } or { ok: false, error }, and exit 0 either way (the test
// reads the answer, not the exit code); exit 2 only if even that could not be written.
// A KafkaJS promise that never settles (admin.setOffsets' consumer crashing, say) leaves node with nothing to
// wait for: it then exits, and says so as its answer.
function main (run) {
  let answered = false
  const answer = value => { answered = true; out(value) }
  process.on('beforeExit', () => {
    if (!answered) answer({ ok: false, error: { name: 'NoAnswer', message: 'KafkaJS settled nothing; see its log' } })
  })
  run(args()).then(
    result => answer({ ok: true, ...result }),
    e => answer({ ok: false, error: failure(e) }),
  ).catch(e => { process.stderr.write(String(e) + '\n'); process.exitCode = 2 })
}

module.exports = { args, client, out, failure, main, CompressionTypes }
