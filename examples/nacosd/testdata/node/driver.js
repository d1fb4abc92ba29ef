// A driver of the Node.js Nacos client (nacos-naming) for nacosd's tests:
// it reads one JSON command a line on stdin and writes one JSON event a
// line on stdout. Servers and credentials come from the environment
// (NACOS_SERVERS, NACOS_USERNAME, NACOS_PASSWORD).
'use strict';

const readline = require('readline');
const { NacosNamingClient } = require('nacos-naming');

const quiet = { info() {}, warn() {}, debug() {}, error() {} };
const logger = process.env.NACOS_NODE_LOG ? console : quiet;

const opts = { logger, serverList: process.env.NACOS_SERVERS, namespace: 'public' };
if (process.env.NACOS_USERNAME) {
  opts.username = process.env.NACOS_USERNAME;
  opts.password = process.env.NACOS_PASSWORD;
}
const client = new NacosNamingClient(opts);

function emit(ev) {
  process.stdout.write(JSON.stringify(ev) + '\n');
}

async function run(cmd) {
  const inst = { ip: cmd.ip, port: cmd.port, ephemeral: cmd.ephemeral !== false, clusterName: 'DEFAULT', weight: 1 };
  switch (cmd.op) {
    case 'register':
      return client.registerInstance(cmd.service, inst);
    case 'deregister':
      return client.deregisterInstance(cmd.service, inst);
    case 'subscribe':
      client.subscribe(cmd.service, hosts => {
        emit({ event: 'hosts', service: cmd.service, hosts: hosts.map(h => h.ip + ':' + h.port) });
      });
      return;
    case 'list':
      return (await client.getAllInstances(cmd.service, 'DEFAULT_GROUP', '', false)).map(h => h.ip + ':' + h.port);
    case 'close':
      await client.close();
      process.exit(0);
  }
  throw new Error('unknown op ' + cmd.op);
}

(async () => {
  await client.ready();
  emit({ event: 'ready' });
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', async line => {
    const cmd = JSON.parse(line);
    try {
      const result = await run(cmd);
      emit({ event: 'ok', id: cmd.id, result: result === undefined ? null : result });
    } catch (err) {
      emit({ event: 'error', id: cmd.id, msg: String(err && err.message || err) });
    }
  });
  rl.on('close', () => process.exit(0));
})().catch(err => {
  emit({ event: 'fatal', msg: String(err && err.stack || err) });
  process.exit(1);
});
