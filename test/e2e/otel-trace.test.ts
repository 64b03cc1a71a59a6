/**
 * One connected trace for a viewer intent across processes: a cluster (the
 * bundle `npm run cluster` runs: router, sequencer, one shard, one gateway)
 * on the machine's PostgreSQL, NATS and Redis, with the OTEL_* settings
 * pointed at a collector stub in this process (OTLP/HTTP JSON), micro-batching
 * on (INTENT_BATCH_MS=20). The viewer's act becomes, at the collector:
 *   gateway  crowdplay.intent                   (root)
 *   gateway  crowdplay.intent_batch.publish     child of the intent, LINKS it
 *   shard    crowdplay.intent_batch.process     child of the publish (traceparent in the NATS headers)
 *   gateway  crowdplay.ack_batch.deliver        child of the shard span (traceparent in the AckBatch's headers)
 * all in one trace, from two processes with their own service.name. Two
 * intents in one micro-batch: the batch span links both (two traces).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { SignJWT } from 'jose';
import { startCluster, type Cluster } from '@crowdplay/cli';
import { GameClient } from '@crowdplay/sdk-game';
import { ViewerClient } from '@crowdplay/sdk-viewer';
import { openStore, type Store } from '@crowdplay/store';
import { serviceUrls, testSchema, type TestSchema } from '@crowdplay/testing';
import { builtProduct, clusterTestEnv, until } from '../helpers.ts';
import { startCollectorStub, type CollectorStub, type StubSpan } from '../otel-collector.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('OpenTelemetry: one trace for a viewer intent, gateway → NATS → shard → gateway (cluster processes)', () => {
  let schema: TestSchema;
  let cluster: Cluster | undefined;
  let store: Store | undefined;
  let stub: CollectorStub;
  let game: GameClient | undefined;
  let viewer: ViewerClient | undefined;
  const lines: string[] = [];

  before(async () => {
    const urls = await serviceUrls();
    schema = await testSchema();
    stub = await startCollectorStub();
    const main = await builtProduct();
    cluster = await startCluster({
      gateways: 1,
      shards: 1,
      env: clusterTestEnv(urls, schema, 'ot', {
        INTENT_BATCH_MS: '20',
        OTEL_EXPORTER_OTLP_ENDPOINT: stub.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_BSP_SCHEDULE_DELAY: '100',
        OTEL_METRIC_EXPORT_INTERVAL: '1000',
      }),
      entry: { execArgv: [], script: main },
      out: (l) => void lines.push(l),
    });
    store = await openStore({ url: urls.databaseUrl, schema: schema.schema, poolMax: 2, pgliteDir: 'memory', migrate: false });
  });

  after(async () => {
    await viewer?.close().catch(() => undefined);
    await game?.close().catch(() => undefined);
    await cluster?.stop();
    await store?.close();
    await schema?.drop();
    await stub?.close();
  });

  it('intent → batch publish (linked) → shard → ack: one trace across the gateway and shard processes', async () => {
    const url = cluster!.gatewayUrls[0]!;
    const { apiKey, tenant } = await store!.tenants.create('acme', 'Acme');
    game = new GameClient({ url, channel: 'otel', apiKey });
    await game.connect();
    game.declare([{ name: 'cheer', maxPerTick: 100 }]);
    const token = await new SignJWT({ tid: 'acme' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('zoe')
      .setExpirationTime('5m')
      .sign(new TextEncoder().encode(tenant.signingSecret));
    viewer = new ViewerClient({ url, channel: 'otel', token, WebSocket, autoReconnect: false });
    await viewer.connect();
    let ack = await viewer.act('cheer');
    for (let i = 0; !ack.ok && i < 100; i++) {
      assert.equal(ack.code, 'CP_ERR_INTENT_NO_GAME', 'refused only until the declaration lands');
      await sleep(20);
      ack = await viewer.act('cheer');
    }
    assert.equal(ack.ok, true);

    const by = (name: string, service: string, pred: (s: StubSpan) => boolean): StubSpan | undefined =>
      stub.spans.find((s) => s.name === name && s.service === service && pred(s));
    const chain = await until(
      () => {
        for (const intent of stub.spans.filter((s) => s.name === 'crowdplay.intent' && s.service === 'crowdplay-gateway')) {
          const batch = by('crowdplay.intent_batch.publish', 'crowdplay-gateway', (s) => s.parentSpanId === intent.spanId);
          if (!batch) continue;
          const shard = by('crowdplay.intent_batch.process', 'crowdplay-crowd-engine', (s) => s.parentSpanId === batch.spanId);
          if (!shard) continue;
          const acks = by('crowdplay.ack_batch.deliver', 'crowdplay-gateway', (s) => s.parentSpanId === shard.spanId);
          if (acks) return { intent, batch, shard, acks };
        }
        return undefined;
      },
      `a complete chain at the collector (${stub.spans.length} spans: ${[...new Set(stub.spans.map((s) => `${s.service}/${s.name}`))].join(', ')})`,
      20_000,
    );
    const { intent, batch, shard, acks } = chain;
    assert.equal(intent.parentSpanId, '', 'the intent starts the trace');
    for (const s of [batch, shard, acks]) assert.equal(s.traceId, intent.traceId, `${s.name} in the intent's trace`);
    assert.ok(
      batch.links.some((l) => l.spanId === intent.spanId && l.traceId === intent.traceId),
      `the batch span links the intent span: ${JSON.stringify(batch.links)}`,
    );
    assert.equal(intent.attributes['crowdplay.channel'], 'otel');
    assert.equal(shard.attributes['crowdplay.shard'], 'shard-1');
    assert.equal(batch.attributes['messaging.batch.message_count'], 1);
    // Kinds: SERVER (2) at the edge, PRODUCER (4) publishes, CONSUMER (5) processes.
    assert.deepEqual([intent.kind, batch.kind, shard.kind, acks.kind], [2, 4, 5, 5]);
    // The probes and scrapes are not traced; the OTLP metric push works beside /metrics.
    assert.ok(
      !stub.spans.some((s) => /\/(metrics|readyz|healthz)/.test(String(s.attributes['url.path'] ?? s.attributes['http.target'] ?? ''))),
    );
    await until(() => stub.metrics.get('crowdplay-gateway')?.has('crowdplay_connections_opened_total'), 'the gateway’s OTLP metric push');

    // Intents in one micro-batch (INTENT_BATCH_MS=20; three sent at once, again if the timer split them): one trace each,
    // the batch span in the first one's trace, linking every one.
    const linked = (): { batch: StubSpan; intents: StubSpan[] } | undefined => {
      for (const batch of stub.spans.filter((s) => s.name === 'crowdplay.intent_batch.publish' && s.links.length >= 2)) {
        const intents = batch.links.map((l) => stub.spans.find((s) => s.name === 'crowdplay.intent' && s.spanId === l.spanId));
        if (intents.every((i) => i !== undefined)) return { batch, intents: intents as StubSpan[] };
      }
      return undefined;
    };
    for (let attempt = 0; attempt < 5 && !linked(); attempt++) {
      const acks = await Promise.all([viewer.act('cheer'), viewer.act('cheer'), viewer.act('cheer')]);
      assert.ok(acks.every((a) => a.ok));
      await until(linked, 'a batch span linking two intents', 3_000).catch(() => undefined);
    }
    const shared = linked();
    assert.ok(shared, 'a batch span linking the intents it carries');
    assert.equal(shared.batch.attributes['messaging.batch.message_count'], shared.intents.length);
    assert.equal(new Set(shared.intents.map((i) => i.traceId)).size, shared.intents.length, 'each intent has its own trace');
    assert.equal(shared.batch.traceId, shared.intents[0]!.traceId, 'the batch continues the first intent’s trace');
    assert.equal(shared.batch.parentSpanId, shared.intents[0]!.spanId);
  });
});
