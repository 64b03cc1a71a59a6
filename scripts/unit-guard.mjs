// Loaded (`node --import`) into every test process of `npm test -- --unit`:
// refuses each TCP connection to a service's port (PostgreSQL, Redis, NATS:
// the ports of DATABASE_URL / REDIS_URL / NATS_URL, or their defaults) with
// an error that names the service, so a file the tier's scan
// (scripts/test-tiers.mjs) wrongly took for a unit test fails at once, with
// the reason, instead of quietly using the services.
import net from 'node:net';
import { URL } from 'node:url';

const services = new Map();
for (const [name, url, port] of [
  ['postgres', process.env.DATABASE_URL, 5432],
  ['redis', process.env.REDIS_URL, 6379],
  ['nats', process.env.NATS_URL, 4222],
]) {
  let p = port;
  try {
    if (url) p = Number(new URL(url).port) || port;
  } catch {
    // an unparsable URL: keep the default port
  }
  services.set(p, name);
}

const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function guardedConnect(...args) {
  const first = Array.isArray(args[0]) ? args[0][0] : args[0];
  const port = Number(typeof first === 'object' && first !== null ? first.port : first);
  const service = services.get(port);
  if (service !== undefined && !(typeof first === 'object' && first?.path)) {
    const err = Object.assign(
      new Error(`unit tier: connection to ${service} (port ${port}) refused; this test file needs services (see scripts/test-tiers.mjs)`),
      { code: 'ECONNREFUSED' },
    );
    process.emitWarning(err.message, 'UnitTierGuard');
    process.nextTick(() => this.destroy(err));
    return this;
  }
  return connect.apply(this, args);
};
