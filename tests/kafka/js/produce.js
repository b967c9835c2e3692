// Produce messages with one KafkaJS producer: node produce.js '{"brokers": [...], "topic": "t",
// "codec": "none|gzip|snappy", "partitioner": "default|legacy", "idempotent": true,
// "batches": [[{"key": "k", "value": "v", "headers": {"h": "x"}, "partition": 0}, ...], ...]}'
// Each batch is one producer.send(); answers {ok, sent: [[{partition, baseOffset, logStartOffset}, ...] per batch]}.
'use strict'

const { Partitioners } = require('kafkajs')
const { client, main, CompressionTypes } = require('./common')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy }
const PARTITIONERS = { default: Partitioners.DefaultPartitioner, legacy: Partitioners.LegacyPartitioner }

main(async ({ brokers, topic, codec = 'none', partitioner = 'default', idempotent = true, batches }) => {
  if (!(codec in CODECS)) throw new Error(`codec ${codec}: KafkaJS here has ${Object.keys(CODECS)}`)
  const producer = client(brokers, 'kafkajs-producer').producer({
    createPartitioner: PARTITIONERS[partitioner],
    idempotent,
    maxInFlightRequests: idempotent ? 1 : undefined,
  })
  await producer.connect()
  try {
    const sent = []
    for (const messages of batches) {
      const metadata = await producer.send({
        topic,
        acks: -1,
        compression: CODECS[codec],
        messages: messages.map(m => ({ ...m, value: m.value === null ? null : String(m.value) })),
      })
      sent.push(metadata.map(m => ({
        partition: m.partition, baseOffset: Number(m.baseOffset), logStartOffset: Number(m.logStartOffset),
      })))
    }
    return { sent }
  } finally {
    await producer.disconnect()
  }
})
