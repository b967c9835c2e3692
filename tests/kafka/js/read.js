// Read a topic from its beginning with one KafkaJS consumer until `count` records came: node read.js
// '{"brokers": [...], "topic": "t", "groupId": "g", "count": 10}'. Answers {ok, records: [{partition, offset,
// key, value, batch: {producerId, producerEpoch, firstSequence, firstOffset, inTransaction}}, ...]}: each
// record with the header of the record batch the Fetch answer carried it in (KafkaJS's batchContext).
'use strict'

const { client, main } = require('./common')

main(async ({ brokers, topic, groupId, count }) => {
  const consumer = client(brokers, 'kafkajs-reader').consumer({ groupId, maxWaitTimeInMs: 200 })
  await consumer.connect()
  try {
    const records = []
    let done
    const enough = new Promise(resolve => { done = resolve })
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const b = message.batchContext
        records.push({
          partition,
          offset: Number(message.offset),
          key: message.key === null ? null : message.key.toString(),
          value: message.value === null ? null : message.value.toString(),
          batch: {
            producerId: String(b.producerId), // an int64: beyond a JS number's exact range
            producerEpoch: b.producerEpoch,
            firstSequence: b.firstSequence,
            firstOffset: Number(b.firstOffset),
            inTransaction: b.inTransaction,
          },
        })
        if (records.length >= count) done()
      },
    })
    await enough
    return { records }
  } finally {
    await consumer.disconnect()
  }
})
