import { before, it } from 'node:test';
import assert from 'node:assert/strict';
import { isCrowdplayError } from '@crowdplay/protocol';
import type { Store } from '../src/index.ts';
import { eachStoreBackend } from './backends.ts';

const bot = (botId: number, tag = 'a') => ({ botId, username: `bot${botId}`, tokenEnc: `tok-${tag}`, webhookSecretEnc: `sec-${tag}` });

eachStoreBackend('tenant bots', (ctx) => {
  let store: Store;
  let stores: Store[];
  before(() => {
    stores = ctx.stores;
    store = stores[0]!;
  });

  it('bots - registered, read back, updated in place (a rotated token), listed per tenant and removed', async () => {
    const first = await store.bots.register('acme', bot(101), 3);
    assert.equal(first.created, true);
    assert.deepEqual((await store.bots.get(101))?.tokenEnc, 'tok-a');
    const again = await store.bots.register('acme', bot(101, 'b'), 3);
    assert.equal(again.created, false);
    assert.equal((await store.bots.get(101))?.webhookSecretEnc, 'sec-b');
    assert.deepEqual(
      (await store.bots.list('acme')).map((b) => b.botId),
      [101],
    );
    assert.deepEqual(await store.bots.list('other'), []);
    await store.bots.remove('acme', 101);
    assert.equal(await store.bots.get(101), null);
  });

  it("bots - another tenant's bot, an unknown tenant, a bad id, a removal of none: refused with a code, nothing changes", async () => {
    await store.bots.register('acme', bot(201), 3);
    await assert.rejects(store.bots.register('other', bot(201, 'x'), 3), (e) => isCrowdplayError(e, 'CP_ERR_TELEGRAM_BOT_TAKEN'));
    await assert.rejects(store.bots.register('nobody', bot(202), 3), (e) => isCrowdplayError(e, 'CP_ERR_TENANT_UNKNOWN'));
    await assert.rejects(store.bots.register('acme', bot(0), 3), (e) => isCrowdplayError(e, 'CP_ERR_PROTO_INVALID'));
    await assert.rejects(store.bots.remove('other', 201), (e) => isCrowdplayError(e, 'CP_ERR_TELEGRAM_BOT_UNKNOWN'));
    const row = await store.bots.get(201);
    assert.equal(row?.tenantId, 'acme');
    assert.equal(row?.tokenEnc, 'tok-a');
    assert.equal(await store.bots.get(202), null);
    await store.bots.remove('acme', 201);
  });

  it('bots - a new bot past the quota (default, then an override) is refused CP_ERR_TENANT_QUOTA; an update of a held bot is not', async () => {
    await store.bots.register('acme', bot(301), 2);
    await store.bots.register('acme', bot(302), 2);
    await assert.rejects(
      store.bots.register('acme', bot(303), 2),
      (e) => isCrowdplayError(e, 'CP_ERR_TENANT_QUOTA') && (e as { quota?: string }).quota === 'bots',
    );
    await store.bots.register('acme', bot(302, 'rotated'), 2);
    assert.deepEqual(
      (await store.bots.list('acme')).map((b) => b.botId),
      [301, 302],
    );
    await store.quotas.set('acme', { bots: 3 });
    await store.bots.register('acme', bot(303), 2);
    await store.quotas.set('acme', { bots: null });
    // Two stores registering at once never pass the quota together.
    const racers = stores.length > 1 ? stores : [store, store];
    const r = await Promise.allSettled([racers[0]!.bots.register('other', bot(401), 1), racers[1]!.bots.register('other', bot(402), 1)]);
    assert.equal(r.filter((x) => x.status === 'fulfilled').length, 1);
    assert.equal((await store.bots.list('other')).length, 1);
  });
});
