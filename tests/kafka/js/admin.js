// Admin calls, in order, with one KafkaJS admin client: node admin.js '{"brokers": [...],
// "calls": [{"call": "createTopics", "args": {...}}, ...]}'. KafkaJS's admin methods take one object
// (describeGroups takes a list of group ids: give "args" as that list). Every call runs whatever the
// previous ones answered; answers {ok, results: [{ok, result} | {ok: false, error}, ...]}.
'use strict'

const { client, main, failure } = require('./common')

main(async ({ brokers, calls }) => {
  const admin = client(brokers, 'kafkajs-admin').admin()
  await admin.connect()
  try {
    const results = []
    for (const { call, args } of calls) {
      if (typeof admin[call] !== 'function') throw new Error(`KafkaJS's admin has no ${call}`)
      try {
        const result = await admin[call](args)
        results.push({ ok: true, result: result === undefined ? null : result })
      } catch (e) {
        results.push({ ok: false, error: failure(e) })
      }
    }
    return { results }
  } finally {
    await admin.disconnect()
  }
})
