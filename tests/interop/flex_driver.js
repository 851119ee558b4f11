// Drives pulsar-flex, an independent pure-JavaScript implementation of Pulsar's binary protocol,
// for tests/interop/test_pulsar_flex.py. One JSON argument says what to do; every outcome is a
// JSON line on stdout, flushed as it happens, so the test can follow a long-running consumer.
//
//   {"op": "produce", "servers": ["127.0.0.1:6650"], "topic": "...", "batch": false,
//    "messages": [{"payload": "a", "properties": {"k": "v"}}], "jwt": null}
//     -> {"event": "sent", "count": N}
//   {"op": "consume", "servers": [...], "topic": "...", "subscription": "s",
//    "subType": "Exclusive|Shared|Failover|Key_Shared", "name": "c1", "count": N,
//    "ack": "individual|cumulative-last|none|nack-first", "initial": "earliest|latest"}
//     -> {"event": "subscribed"}, then {"event": "message", ...} per message,
//        then {"event": "done"} once N messages were taken (0: run until killed)
// Errors: {"event": "error", "message": "..."} and exit code 1.
'use strict';

const { Producer, Consumer, logLevel } = require('pulsar-flex');

const SUB_TYPES = {
  Exclusive: Consumer.SUB_TYPES.EXCLUSIVE,
  Shared: Consumer.SUB_TYPES.SHARED,
  Failover: Consumer.SUB_TYPES.FAILOVER,
  Key_Shared: Consumer.SUB_TYPES.KEY_SHARED,
};

function emit(event) {
  process.stdout.write(JSON.stringify(event) + '\n');
}

async function produce(spec) {
  const producer = new Producer({
    topic: spec.topic,
    discoveryServers: spec.servers,
    jwt: spec.jwt || undefined,
    producerAccessMode: Producer.ACCESS_MODES.SHARED,
    logLevel: logLevel.NOTHING,
  });
  await producer.create();
  const messages = spec.messages.map((m) => ({ payload: m.payload, properties: m.properties || {} }));
  if (spec.batch) {
    await producer.sendBatch({ messages });
  } else {
    for (const message of messages) await producer.sendMessage(message);
  }
  emit({ event: 'sent', count: messages.length });
  await producer.close();
}

async function consume(spec) {
  const consumer = new Consumer({
    topic: spec.topic,
    discoveryServers: spec.servers,
    jwt: spec.jwt || undefined,
    subscription: spec.subscription,
    subType: SUB_TYPES[spec.subType],
    consumerName: spec.name,
    receiveQueueSize: spec.receiveQueueSize || 100,
    initialPosition:
      spec.initial === 'latest' ? Consumer.INITIAL_POSITION.LATEST : Consumer.INITIAL_POSITION.EARLIEST,
    logLevel: logLevel.NOTHING,
  });
  await consumer.subscribe();
  emit({ event: 'subscribed' });
  let taken = 0;
  await new Promise((resolve, reject) => {
    consumer
      .run({
        autoAck: false,
        onMessage: async ({ ack, message, properties, redeliveryCount, command }) => {
          const id = command.messageId;
          if (spec.ack === 'nack-first' && !redeliveryCount) {
            emit({ event: 'nacked', payload: message.toString() });
            await ack({ type: Consumer.ACK_TYPES.NEGATIVE });
            return;
          }
          taken += 1;
          emit({
            event: 'message',
            payload: message.toString(),
            properties,
            redeliveryCount: redeliveryCount || 0,
            ledgerId: Number(id.ledgerid),
            entryId: Number(id.entryid),
          });
          const last = spec.count > 0 && taken >= spec.count;
          if (spec.ack === 'individual' || spec.ack === 'nack-first') await ack();
          if (spec.ack === 'cumulative-last' && last) await ack({ type: Consumer.ACK_TYPES.CUMULATIVE });
          if (last) resolve();
        },
      })
      .catch(reject);
  });
  emit({ event: 'done', count: taken });
}

async function main() {
  const spec = JSON.parse(process.argv[2]);
  if (spec.op === 'produce') await produce(spec);
  else if (spec.op === 'consume') await consume(spec);
  else throw new Error(`unknown op ${spec.op}`);
}

main().then(
  () => process.exit(0),
  (e) => {
    emit({ event: 'error', message: String((e && e.message) || e) });
    process.exit(1);
  },
);
