/**
 * Multi-channel game sockets (docs/protocol.md "Multi-channel games"): one socket attaches many channels, gets
 * their batches tagged by channel, answers per channel, and keeps the per-channel contracts (tenant checks, one game
 * per channel, resume, bounded queues).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeJson } from '@crowdplay/bus';
import { CONTROL_VERSION } from '@crowdplay/protocol';
import { connected, openSuiteStore, startHarness, waitUntil, type Client, type Frame, type Harness, type SuiteStore } from './helpers.ts';

let suite: SuiteStore;
let h: Harness;
const ANSWERED = ['roomA', 'roomB', 'roomC', 'tg101', 'tg102', 'tgn5', 'tb7_n5', 'tg103', 'rivalroom'];

function batch(channel: string, ev: number): Record<string, unknown> {
  return { t: 'batch', channel, ev, tick: ev, closedAt: Date.now(), actions: { vote: { tally: { a: 1 }, intents: [], dropped: 0 } } };
}
function multi(key = suite.acme.apiKey): Promise<Client> {
  return connected(h.wsUrl({ role: 'game', multi: 1, key }));
}
async function attach(c: Client, ref: string, fields: Record<string, unknown>): Promise<Frame> {
  c.send({ t: 'attach', ref, ...fields });
  return c.frame((f) => f.t === 'attached' && f.ref === ref, `attached ${ref}`);
}
/** Closes the sockets and waits until the gateway has freed their channels. */
async function closeAll(...clients: Client[]): Promise<void> {
  await Promise.all(clients.map((c) => c.close()));
  await waitUntil(() => h.gateway.stats().games === 0, 'game slots freed');
}
function ctlOf(channel: string, op: string): number {
  return h.shard.ctl.filter((c) => c.channel === channel && c.req.op === op).length;
}

before(async () => {
  suite = await openSuiteStore();
  // tb7_n5: a chat of the tenant's own bot (bot 7).
  for (const c of ['roomA', 'roomB', 'roomC', 'tg101', 'tg102', 'tgn5', 'tb7_n5']) await suite.store.channels.ensure(c, 'acme');
  await suite.store.channels.ensure('tg201', 'rival');
  h = await startHarness({ store: suite.store, channels: ANSWERED, gateway: { gameCtlRetryMs: 0 } });
});
after(async () => {
  await h.close();
  await suite.close();
});

describe('multi-channel game socket', () => {
  it("attach - checks each channel: its own are attached, another tenant's and unknown chats are refused", async () => {
    const c = await multi();
    const w = await c.welcome();
    assert.deepEqual([w.multi, w.channel, w.role], [true, '', 'game']);
    const a = await attach(c, 'a1', { channels: ['roomA', 'roomB', 'rivalroom', 'tg999'] });
    assert.deepEqual(a.channels, ['roomA', 'roomB']);
    assert.deepEqual(
      (a.refused as Array<{ channel: string; code: string }>).map((r) => [r.channel, r.code]),
      [
        ['rivalroom', 'CP_ERR_AUTH_FORBIDDEN_CHANNEL'],
        ['tg999', 'CP_ERR_CHANNEL_UNKNOWN'],
      ],
    );
    assert.equal(await suite.store.channels.get('tg999'), null, 'a game never creates a chat channel');
    // Batches of each attached channel arrive tagged by channel; another tenant's never do.
    h.bus.publish(h.subj.channelGame('rivalroom'), encodeJson(batch('rivalroom', 1)));
    h.bus.publish(h.subj.channelGame('roomA'), encodeJson(batch('roomA', 2)));
    h.bus.publish(h.subj.channelGame('roomB'), encodeJson(batch('roomB', 3)));
    await c.frame((f) => f.t === 'batch' && f.channel === 'roomB', 'roomB batch');
    assert.deepEqual(
      c.frames.filter((f) => f.t === 'batch').map((f) => f.channel),
      ['roomA', 'roomB'],
    );
    // One round: per-channel requests, answered per channel.
    c.send({ t: 'round.open', ref: 'r1', channel: 'roomB', round: 'q1', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 });
    const res = await c.frame((f) => f.t === 'result' && f.ref === 'r1', 'result r1');
    assert.equal(res.channel, 'roomB');
    const open = h.shard.ctl.find((x) => x.req.op === 'round.open');
    assert.deepEqual([open?.channel, (open?.req as { tenant?: string }).tenant], ['roomB', 'acme']);
    h.shard.ctlReply = (ch, req) =>
      ch === 'roomA' && req.op === 'state' ? { ok: false, code: 'CP_ERR_GAME_STATE_TOO_BIG', message: 'too big' } : { ok: true };
    c.send({ t: 'state', ref: 's1', channel: 'roomA', state: { big: true } });
    const err = await c.frame((f) => f.t === 'error' && f.ref === 's1', 'error s1');
    assert.deepEqual([err.code, err.channel], ['CP_ERR_GAME_STATE_TOO_BIG', 'roomA']);
    h.shard.ctlReply = () => ({ ok: true });
    await closeAll(c);
  });

  it('bad input - a request for a channel not attached, or without a channel, is refused and reaches no shard', async () => {
    const c = await multi();
    await attach(c, 'a1', { channels: ['roomA'] });
    const before = h.shard.ctl.length;
    c.send({ t: 'round.open', ref: 'x1', channel: 'rivalroom', round: 'q9', kind: 'pool', outcomes: ['a', 'b'], durationMs: 1_000 });
    const e1 = await c.frame((f) => f.t === 'error' && f.ref === 'x1', 'x1');
    assert.deepEqual([e1.code, e1.channel], ['CP_ERR_GAME_NOT_ATTACHED', 'rivalroom']);
    c.send({ t: 'state', ref: 'x2', state: {} });
    const e2 = await c.frame((f) => f.t === 'error' && f.ref === 'x2', 'x2');
    assert.equal(e2.code, 'CP_ERR_PROTO_INVALID');
    c.send({ t: 'attach', ref: 'x3', channels: ['bad id!'] });
    assert.equal((await c.frame((f) => f.t === 'error' && f.ref === 'x3', 'x3')).code, 'CP_ERR_PROTO_INVALID');
    assert.equal(h.shard.ctl.length, before, 'nothing reached a shard');
    await closeAll(c);
    const roomAStates = ctlOf('roomA', 'state');
    // A single-channel socket: attach is not one of its frames; a frame naming another channel is refused.
    const single = await connected(h.wsUrl({ role: 'game', channel: 'roomC', key: suite.acme.apiKey }));
    single.send({ t: 'attach', ref: 'y1', channels: ['roomA'] });
    assert.equal((await single.frame((f) => f.t === 'error' && f.ref === 'y1', 'y1')).code, 'CP_ERR_PROTO_UNKNOWN_TYPE');
    single.send({ t: 'state', ref: 'y2', channel: 'roomA', state: {} });
    assert.equal((await single.frame((f) => f.t === 'error' && f.ref === 'y2', 'y2')).code, 'CP_ERR_PROTO_INVALID');
    single.send({ t: 'state', ref: 'y3', channel: 'roomC', state: { ok: 1 } });
    assert.equal(
      (await single.frame((f) => f.t === 'result' && f.ref === 'y3', 'y3')).channel,
      undefined,
      'single-channel results unchanged',
    );
    assert.equal(ctlOf('roomA', 'state'), roomAStates);
    await closeAll(single);
    // A multi socket naming a channel in its URL is refused.
    const { Client } = await import('./helpers.ts');
    const bad = new Client(h.wsUrl({ role: 'game', multi: 1, channel: 'roomA', key: suite.acme.apiKey }));
    assert.equal((await bad.closed).reason, 'CP_ERR_PROTO_INVALID');
    // `multi` other than 1 or 0, or on a viewer's socket, is named (not taken for a channel id); nothing is attached.
    for (const query of [
      { role: 'game', multi: 2, key: suite.acme.apiKey },
      { role: 'crowd', multi: 1, channel: 'roomA', token: 'x.y.z' },
    ]) {
      const c = new Client(h.wsUrl(query));
      const err = await c.frame((f) => f.t === 'error', `error ${JSON.stringify(query)}`);
      assert.equal(err.code, 'CP_ERR_PROTO_INVALID', JSON.stringify(query));
      assert.match(String(err.message), /query parameter multi /, JSON.stringify(query));
      assert.equal((await c.closed).reason, 'CP_ERR_PROTO_INVALID');
    }
    assert.equal(h.gateway.stats().games, 0, 'no game slot taken');
  });

  it('pipelined - frames sent right after an attach, naming its channels, run once it ends; a refused one is not attached', async () => {
    const c = await multi();
    await c.welcome();
    const states = ctlOf('roomC', 'state');
    // No wait for `attached`: the frames follow the attach on the wire.
    c.send({ t: 'attach', ref: 'p1', channels: ['roomC', 'rivalroom'] });
    c.send({ t: 'state', ref: 'p2', channel: 'roomC', state: { n: 1 } });
    c.send({ t: 'state', ref: 'p3', channel: 'rivalroom', state: { n: 2 } });
    const res = await c.frame((f) => f.t === 'result' && f.ref === 'p2', 'result p2');
    assert.equal(res.channel, 'roomC');
    const err = await c.frame((f) => f.t === 'error' && f.ref === 'p3', 'error p3');
    assert.deepEqual([err.code, err.channel], ['CP_ERR_GAME_NOT_ATTACHED', 'rivalroom']);
    const order = c.frames.filter((f) => ['p1', 'p2', 'p3'].includes(String(f.ref))).map((f) => `${String(f.t)} ${String(f.ref)}`);
    assert.equal(order[0], 'attached p1', `the attach answers before the frames held behind it: ${order.join(', ')}`);
    assert.equal(ctlOf('roomC', 'state'), states + 1, 'the state reached the shard once');
    assert.equal(ctlOf('rivalroom', 'state'), 0, "another tenant's channel got nothing");
    // Once attached, a frame goes straight to its channel; one naming a channel no attach names is refused at once.
    c.send({ t: 'state', ref: 'p4', channel: 'roomC', state: { n: 3 } });
    assert.equal((await c.frame((f) => f.t === 'result' && f.ref === 'p4', 'result p4')).channel, 'roomC');
    c.send({ t: 'state', ref: 'p5', channel: 'roomB', state: {} });
    assert.equal((await c.frame((f) => f.t === 'error' && f.ref === 'p5', 'error p5')).code, 'CP_ERR_GAME_NOT_ATTACHED');
    await closeAll(c);
  });

  it('attach - a store that fails answers the attach with a retryable error; nothing is attached', async () => {
    const c = await multi();
    const channels = suite.store.channels;
    const getMany = channels.getMany.bind(channels);
    channels.getMany = () => Promise.reject(new Error('connection refused'));
    try {
      c.send({ t: 'attach', ref: 'f1', channels: ['roomA'] });
      const e = await c.frame((f) => f.t === 'error' && f.ref === 'f1', 'f1');
      assert.equal(e.code, 'CP_ERR_STORE_UNAVAILABLE');
      assert.equal(h.gateway.stats().games, 0);
    } finally {
      channels.getMany = getMany;
    }
    const again = await attach(c, 'f2', { channels: ['roomA'] });
    assert.deepEqual(again.channels, ['roomA'], 'sent again, it goes through');
    await closeAll(c);
  });

  it('one game per channel - a channel attached here refuses a second game, and is free again after detach', async () => {
    const c = await multi();
    await attach(c, 'a1', { channels: ['roomA', 'roomB'] });
    const other = await multi();
    const a = await attach(other, 'a2', { channels: ['roomA', 'roomC'] });
    assert.deepEqual(a.channels, ['roomC']);
    assert.deepEqual(
      (a.refused as Array<{ code: string }>).map((r) => r.code),
      ['CP_ERR_CHANNEL_GAME_CONNECTED'],
    );
    const single = await import('./helpers.ts').then(
      (m) => new m.Client(h.wsUrl({ role: 'game', channel: 'roomB', key: suite.acme.apiKey })),
    );
    assert.equal((await single.closed).code, 4009);
    // Detach: the shard is asked to release, the channel leaves the socket, its batches stop.
    const releases = ctlOf('roomA', 'release');
    c.send({ t: 'detach', ref: 'd1', channels: ['roomA', 'roomZ'] });
    const d = await c.frame((f) => f.t === 'detached' && f.ref === 'd1', 'detached');
    assert.deepEqual(d.channels, ['roomA']);
    assert.equal(ctlOf('roomA', 'release'), releases + 1);
    h.bus.publish(h.subj.channelGame('roomA'), encodeJson(batch('roomA', 50)));
    h.bus.publish(h.subj.channelGame('roomB'), encodeJson(batch('roomB', 51)));
    await c.frame((f) => f.t === 'batch' && f.ev === 51, 'roomB batch');
    assert.equal(c.frames.filter((f) => f.t === 'batch' && f.ev === 50).length, 0);
    const now = await attach(other, 'a3', { channels: ['roomA'] });
    assert.deepEqual(now.channels, ['roomA']);
    await closeAll(c, other);
  });

  it('declare without channel - goes to every channel attached, and to each attached later', async () => {
    const c = await multi();
    await attach(c, 'a1', { channels: ['roomA', 'roomB'] });
    const [a0, b0, c0] = [ctlOf('roomA', 'declare'), ctlOf('roomB', 'declare'), ctlOf('roomC', 'declare')];
    c.send({ t: 'declare', actions: [{ name: 'vote', maxPerTick: 10, options: ['a', 'b'] }] });
    await waitUntil(() => ctlOf('roomA', 'declare') === a0 + 1 && ctlOf('roomB', 'declare') === b0 + 1, 'declared on both');
    await attach(c, 'a2', { channels: ['roomC'] });
    await waitUntil(() => ctlOf('roomC', 'declare') === c0 + 1, 'declared on the channel attached later');
    await closeAll(c);
  });

  it("chats - every Telegram chat of the tenant, and each one placed later; another tenant's chats never", async () => {
    const c = await multi();
    c.send({ t: 'declare', actions: [{ name: 'vote', maxPerTick: 10, options: ['a', 'b'] }] });
    const a = await attach(c, 'a1', { chats: true });
    assert.deepEqual(a.channels, ['tb7_n5', 'tg101', 'tg102', 'tgn5']);
    await suite.store.channels.ensure('tg103', 'acme');
    const declares = ctlOf('tg103', 'declare');
    const placed = (channel: string): void =>
      h.bus.publish(h.subj.routerAssignments(), encodeJson({ v: CONTROL_VERSION, changes: [{ channel, shard: 's1', epoch: 1 }] }));
    placed('tg201');
    placed('tg103');
    const later = await c.frame((f) => f.t === 'attached' && f.ref === undefined, 'attached later');
    assert.deepEqual(later.channels, ['tg103']);
    await waitUntil(() => ctlOf('tg103', 'declare') === declares + 1, 'the new chat got the declaration');
    h.bus.publish(h.subj.channelGame('tg103'), encodeJson(batch('tg103', 70)));
    await c.frame((f) => f.t === 'batch' && f.channel === 'tg103', 'tg103 batch');
    assert.equal(h.gateway.stats().games, 5, 'the rival chat was not attached');
    // A chat detached by name stays detached when it is placed again (a move).
    c.send({ t: 'detach', ref: 'd0', channels: ['tg102'] });
    await c.frame((f) => f.t === 'detached' && f.ref === 'd0', 'detached tg102');
    placed('tg102');
    placed('tg103'); // already attached: nothing
    c.send({ t: 'attach', ref: 'a9', channels: ['roomA'] }); // runs after the placements were handled
    await c.frame((f) => f.t === 'attached' && f.ref === 'a9', 'attached a9');
    assert.equal(c.frames.filter((f) => f.t === 'attached' && f.ref === undefined).length, 1, 'no chat attached again');
    c.send({ t: 'detach', ref: 'd9', channels: ['roomA'] });
    await c.frame((f) => f.t === 'detached' && f.ref === 'd9', 'detached a9');
    c.send({ t: 'detach', ref: 'd1', chats: true });
    const d = await c.frame((f) => f.t === 'detached' && f.ref === 'd1', 'detached');
    assert.deepEqual((d.channels as string[]).sort(), ['tb7_n5', 'tg101', 'tg103', 'tgn5']);
    await closeAll(c);
  });

  it('resume - a channel attached with its lastEventId gets the batches it missed, another channel none', async () => {
    const epoch = await suite.store.channels.acquire('roomB', 's1'); // the log takes a batch at its channel's epoch
    await suite.store.events.append(
      [6, 7].map((ev) => ({ channel: 'roomB', eventId: ev, epoch, kind: 'batch', body: JSON.stringify(batch('roomB', ev)) })),
    );
    const c = await multi();
    await attach(c, 'a1', { channels: ['roomB', 'roomC'], lastEventIds: { roomB: 5 } });
    await c.frame((f) => f.t === 'batch' && f.ev === 7, 'replayed');
    assert.deepEqual(
      c.frames.filter((f) => f.t === 'batch').map((f) => [f.channel, f.ev]),
      [
        ['roomB', 6],
        ['roomB', 7],
      ],
    );
    await closeAll(c);
  });

  it('bounded queues - a channel whose shard does not answer is refused as busy; the others keep going', async () => {
    await suite.store.channels.ensure('roomSlow', 'acme');
    h.bus.subscribe(h.subj.channelCtl('roomSlow'), () => undefined); // its owner never answers: each request waits the bus timeout
    const c = await multi();
    await attach(c, 'a1', { channels: ['roomSlow', 'roomA'] });
    for (let i = 0; i < 70; i++) c.send({ t: 'round.cancel', ref: `c${i}`, channel: 'roomSlow', round: 'q1' });
    const busy = await c.frame((f) => f.t === 'error' && f.code === 'CP_ERR_GAME_CHANNEL_BUSY', 'busy');
    assert.equal(busy.channel, 'roomSlow');
    c.send({ t: 'state', ref: 'fast', channel: 'roomA', state: { n: 1 } });
    await c.frame((f) => f.t === 'result' && f.ref === 'fast', 'roomA answered', 1_000);
    await closeAll(c);
  });
});
