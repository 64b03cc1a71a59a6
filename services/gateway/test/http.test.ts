import { describe, it } from 'node:test';
import { createHash } from 'node:crypto';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect, createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { jwtVerify } from 'jose';
import { Client, metricValue, startHarness, unusedStore } from './helpers.ts';
import { listenOverflows } from '../src/metrics.ts';
import { hostedSdkBundle, requestCheckIntervalMs, SDK_VIEWER_PACKAGE, sdkViewerBanner } from '../src/http.ts';
import { devTokenDecision } from '../src/dev-tokens.ts';
import { defaultConfig, loadConfig } from '@crowdplay/config';
import { isCrowdplayError } from '@crowdplay/protocol';
import { hostedViewerBanner } from '../../../scripts/build-sdk.mjs';

describe('gateway http', () => {
  it('health - /healthz is 200 from creation; /readyz is 503 until listen, 200 serving, 503 after drain', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false });
    try {
      assert.equal((await h.gateway.app.inject({ url: '/healthz' })).statusCode, 200);
      const notStarted = await h.gateway.app.inject({ url: '/readyz' });
      assert.equal(notStarted.statusCode, 503);
      assert.deepEqual(notStarted.json(), { ready: false, state: 'created' });
      await h.gateway.listen();
      assert.deepEqual((await h.gateway.app.inject({ url: '/readyz' })).json(), { ready: true });
      await h.gateway.drain();
      const draining = await h.gateway.app.inject({ url: '/readyz' });
      assert.equal(draining.statusCode, 503);
      assert.deepEqual(draining.json(), { ready: false, state: 'draining' });
      assert.equal((await h.gateway.app.inject({ url: '/healthz' })).statusCode, 200, 'alive while draining');
    } finally {
      await h.close();
    }
    await h.gateway.close(); // idempotent
    assert.equal(h.gateway.state, 'closed');
  });

  it('metrics - not served on PORT by default: 404, no Prometheus text where viewers connect', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false });
    try {
      h.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_CONNECTION_RATE');
      const res = await h.gateway.app.inject({ url: '/metrics' });
      assert.deepEqual([res.statusCode, res.json<{ code: string }>().code], [404, 'CP_ERR_HTTP_NOT_FOUND']);
      assert.doesNotMatch(res.body, /crowdplay_/);
    } finally {
      await h.close();
    }
  });

  it('metrics - with METRICS_ON_PORT /metrics is Prometheus text with the gateway instruments', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false, http: { metricsOnPort: true } });
    try {
      h.telemetry.refusals.refuse('gateway', 'CP_ERR_LIMIT_CONNECTION_RATE');
      const res = await h.gateway.app.inject({ url: '/metrics' });
      assert.equal(res.statusCode, 200);
      assert.equal(res.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
      assert.match(res.body, /^crowdplay_gateway_channels\{[^}]*\} 0$/m);
      assert.equal(metricValue(res.body, 'crowdplay_refusals_total', { area: 'gateway', reason: 'CP_ERR_LIMIT_CONNECTION_RATE' }), 1);
    } finally {
      await h.close();
    }
  });

  it('page - / serves the viewer page, /app.js its script, /sdk-viewer.js the bundled SDK (cached)', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false });
    try {
      const page = await h.gateway.app.inject({ url: '/' });
      assert.equal(page.statusCode, 200);
      assert.match(String(page.headers['content-type']), /^text\/html/);
      assert.match(page.body, /<script type="module" src="\/app\.js">/);
      assert.match(page.body, /data-testid="state"/);
      const app = await h.gateway.app.inject({ url: '/app.js' });
      assert.equal(app.statusCode, 200);
      assert.match(String(app.headers['content-type']), /^text\/javascript/);
      assert.match(app.body, /from '\/sdk-viewer\.js'/);
      const sdk = await h.gateway.app.inject({ url: '/sdk-viewer.js' });
      assert.equal(sdk.statusCode, 200);
      assert.match(String(sdk.headers['content-type']), /^text\/javascript/);
      assert.match(sdk.body, /ViewerClient/);
      const { version } = JSON.parse(readFileSync(SDK_VIEWER_PACKAGE, 'utf8')) as { version: string };
      assert.ok(sdk.body.startsWith(sdkViewerBanner(version)), `banner with the package version ${version}: ${sdk.body.slice(0, 120)}`);
      assert.doesNotMatch(sdk.body, /from\s*["']ws["']|require\(["']ws["']\)/, 'browser bundle: no ws import');
      const again = await h.gateway.app.inject({ url: '/sdk-viewer.js' });
      assert.equal(again.body, sdk.body);
    } finally {
      await h.close();
    }
  });

  it('headers - pages carry a CSP allowing exactly what they load and who may frame them; every answer says nosniff and no-referrer', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false });
    try {
      const csp = (res: { headers: Record<string, unknown> }): Map<string, string> =>
        new Map(
          String(res.headers['content-security-policy'])
            .split(/;\s*/)
            .map((d) => [d.split(' ')[0]!, d.slice(d.indexOf(' ') + 1)]),
        );
      const page = await h.gateway.app.inject({ url: '/' });
      const style = /<style>([\s\S]*?)<\/style>/.exec(page.body)![1]!;
      const styleHash = `'sha256-${createHash('sha256').update(style).digest('base64')}'`;
      const viewer = csp(page);
      assert.equal(viewer.get('default-src'), "'none'");
      assert.equal(viewer.get('script-src'), "'self'", 'its own scripts only: no eval');
      assert.equal(viewer.get('style-src'), `'self' ${styleHash}`, 'its inline style, by hash');
      assert.equal(viewer.get('connect-src'), "'self'");
      assert.equal(viewer.get('frame-ancestors'), "'self'", 'EMBED_ORIGINS empty: same origin only');
      const miniApp = csp(await h.gateway.app.inject({ url: '/tg/' }));
      assert.equal(miniApp.get('frame-ancestors'), "'self' https://web.telegram.org", "Telegram's web client frames Mini Apps");
      assert.equal(miniApp.get('script-src'), "'self' https://telegram.org/js/telegram-web-app.js", "its own and Telegram's script");
      for (const url of ['/', '/tg/', '/app.js', '/healthz', '/nope']) {
        const res = await h.gateway.app.inject({ url });
        assert.equal(res.headers['x-content-type-options'], 'nosniff', url);
        assert.equal(res.headers['referrer-policy'], 'no-referrer', url);
      }
      const json = await h.gateway.app.inject({ url: '/healthz' });
      assert.equal(json.headers['content-security-policy'], "default-src 'none'; frame-ancestors 'none'", 'not a page: framed by nobody');
    } finally {
      await h.close();
    }
    const embedded = await startHarness({
      store: unusedStore(),
      listen: false,
      http: { embedOrigins: 'https://streamer.example, https://*.partner.example:8443' },
    });
    try {
      const res = await embedded.gateway.app.inject({ url: '/' });
      assert.match(
        String(res.headers['content-security-policy']),
        /frame-ancestors 'self' https:\/\/streamer\.example https:\/\/\*\.partner\.example:8443$/,
      );
    } finally {
      await embedded.close();
    }
  });

  it('overlay - /overlay serves the page for a channel; an unknown, repeated, malformed or missing parameter is named in a 400', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false, http: { embedOrigins: 'https://streamer.example' } });
    try {
      const ok = await h.gateway.app.inject({ url: '/overlay?channel=demo&theme=light' });
      assert.equal(ok.statusCode, 200);
      assert.match(ok.body, /<script type="module" src="\/overlay\.js">/);
      assert.doesNotMatch(ok.body, /<(input|button|textarea|form)\b/, 'no controls');
      assert.match(String(ok.headers['content-security-policy']), /frame-ancestors 'self' https:\/\/streamer\.example$/);
      assert.equal((await h.gateway.app.inject({ url: '/overlay?channel=demo&token=a.b.c' })).statusCode, 200);
      const script = await h.gateway.app.inject({ url: '/overlay.js' });
      assert.deepEqual([script.statusCode, /from '\/sdk-viewer\.js'/.test(script.body)], [200, true]);
      const bad: Array<[string, RegExp]> = [
        ['/overlay', /"channel" is required/],
        ['/overlay?channel=no%20spaces', /"channel" must be a channel id/],
        ['/overlay?channel=demo&colour=red', /unknown overlay parameter "colour" \(known: channel, token, theme\)/],
        ['/overlay?channel=demo&theme=blue', /"theme" must be dark or light/],
        ['/overlay?channel=demo&channel=other', /"channel" given more than once/],
        ['/overlay?channel=demo&token=not-a-jwt', /"token" must be a viewer JWT/],
        [`/overlay?channel=demo&token=cpw_${'A'.repeat(43)}`, /a watch token goes in the URL fragment/],
      ];
      for (const [url, message] of bad) {
        const res = await h.gateway.app.inject({ url });
        assert.equal(res.statusCode, 400, url);
        const body = res.json<{ code: string; message: string }>();
        assert.equal(body.code, 'CP_ERR_PROTO_INVALID', url);
        assert.match(body.message, message, url);
        assert.doesNotMatch(res.body, /<html/i, 'no page for a bad URL');
      }
    } finally {
      await h.close();
    }
  });

  it('page - the hosted client is the prebuilt file when there is one, else built from the sources with the same banner', async () => {
    assert.equal(sdkViewerBanner('1.2.3'), hostedViewerBanner('1.2.3'), 'the gateway and scripts/build-sdk.mjs write one banner');
    const dir = mkdtempSync(join(tmpdir(), 'crowdplay-sdk-'));
    try {
      const prebuilt = join(dir, 'sdk-viewer.js');
      writeFileSync(prebuilt, '/*! prebuilt */ export {};');
      assert.equal(await hostedSdkBundle(prebuilt), '/*! prebuilt */ export {};');
      const built = await hostedSdkBundle(join(dir, 'missing.js'));
      assert.match(built, /^\/\*! @crowdplay\/sdk-viewer \d+\.\d+\.\d+ /);
      assert.match(built, /ViewerClient/);
      await assert.rejects(
        hostedSdkBundle(dir),
        (err: NodeJS.ErrnoException) => err.code === 'EISDIR',
        'a read error other than a missing file',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('dev tokens - standalone mints a dev-tenant viewer token; bad input gets 400 with a code', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false });
    try {
      const res = await h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', payload: { channel: 'demo', viewer: 'ann' } });
      assert.equal(res.statusCode, 200);
      const { token, viewer } = res.json<{ token: string; viewer: string }>();
      assert.equal(viewer, 'ann');
      const { payload, protectedHeader } = await jwtVerify(token, new TextEncoder().encode(h.config.standalone.tenantSecret));
      assert.equal(protectedHeader.alg, 'HS256');
      assert.equal(payload.sub, 'ann');
      assert.equal(payload.tid, 'dev');
      assert.equal(payload.ch, 'demo');
      assert.ok(typeof payload.exp === 'number' && payload.exp > Date.now() / 1_000);
      const anon = await h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', payload: { channel: 'demo' } });
      assert.match(anon.json<{ viewer: string }>().viewer, /^v-[0-9a-f]{12}$/);

      const badChannel = await h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', payload: { channel: 'no spaces' } });
      assert.equal(badChannel.statusCode, 400);
      assert.equal(badChannel.json<{ code: string }>().code, 'CP_ERR_CHANNEL_INVALID_ID');
      const badViewer = await h.gateway.app.inject({
        method: 'POST',
        url: '/v1/tokens/dev',
        payload: { channel: 'demo', viewer: 'x'.repeat(129) },
      });
      assert.equal(badViewer.statusCode, 400);
      assert.equal(badViewer.json<{ code: string }>().code, 'CP_ERR_PROTO_INVALID');
      const controlViewer = await h.gateway.app.inject({
        method: 'POST',
        url: '/v1/tokens/dev',
        payload: { channel: 'demo', viewer: 'a\u0001' },
      });
      assert.deepEqual(
        [controlViewer.statusCode, controlViewer.json<{ code: string }>().code],
        [400, 'CP_ERR_PROTO_INVALID'],
        'no token the socket would refuse',
      );
      // A Telegram chat's players come only from verified initData: no dev token names one or opens its chat.
      for (const payload of [{ channel: 'tgn100123', viewer: 'ann' }, { channel: 'tg42' }, { channel: 'demo', viewer: 'tg:42' }]) {
        const refused = await h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', payload });
        assert.deepEqual(
          [refused.statusCode, refused.json<{ code: string }>().code],
          [400, 'CP_ERR_PROTO_INVALID'],
          JSON.stringify(payload),
        );
      }
      // Unknown fields are refused, as every other body route refuses them.
      const extra = await h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', payload: { channel: 'demo', admin: true } });
      assert.equal(extra.statusCode, 400, extra.body);
      assert.equal(extra.json<{ code: string }>().code, 'CP_ERR_PROTO_INVALID');
      assert.match(extra.json<{ message: string }>().message, /unknown field "admin"/);
      const badJson = await h.gateway.app.inject({
        method: 'POST',
        url: '/v1/tokens/dev',
        headers: { 'content-type': 'application/json' },
        payload: '{"channel":',
      });
      assert.equal(badJson.statusCode, 400);
      assert.equal(badJson.json<{ code: string }>().code, 'CP_ERR_PROTO_MALFORMED');
      // Valid JSON that would poison a prototype is refused as the parser refuses it, and the answer says so.
      for (const payload of ['{"channel":"demo","__proto__":{"admin":true}}', '{"channel":"demo","constructor":{"prototype":{"x":1}}}']) {
        const poisoned = await h.gateway.app.inject({
          method: 'POST',
          url: '/v1/tokens/dev',
          headers: { 'content-type': 'application/json' },
          payload,
        });
        assert.equal(poisoned.statusCode, 400, payload);
        assert.deepEqual(poisoned.json(), {
          code: 'CP_ERR_PROTO_MALFORMED',
          message: 'body is not valid JSON, or holds a __proto__ or constructor.prototype key',
        });
      }
      for (const type of ['text/plain', 'text/plain; charset=utf-8', 'application/octet-stream']) {
        const wrongType = await h.gateway.app.inject({
          method: 'POST',
          url: '/v1/tokens/dev',
          headers: { 'content-type': type },
          payload: '{"channel":"demo"}',
        });
        assert.deepEqual([wrongType.statusCode, wrongType.json<{ code: string }>().code], [415, 'CP_ERR_PROTO_INVALID'], type);
        assert.doesNotMatch(wrongType.body, /token/, 'no token minted');
      }
      const tooBig = await h.gateway.app.inject({
        method: 'POST',
        url: '/v1/tokens/dev',
        payload: { channel: 'demo', pad: 'x'.repeat(2_000) },
      });
      assert.equal(tooBig.statusCode, 413);
      assert.deepEqual(tooBig.json(), { code: 'CP_ERR_PROTO_TOO_BIG', message: 'body larger than 1024 bytes' });
    } finally {
      await h.close();
    }
  });

  it('dev tokens - standalone on a public HOST serves no route (404), unless DEV_TOKENS=on, which start-up warns about', async () => {
    const mint = (h: Awaited<ReturnType<typeof startHarness>>) =>
      h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', payload: { channel: 'demo', viewer: 'ann' } });
    for (const host of ['0.0.0.0', '::', '203.0.113.7']) {
      const h = await startHarness({ store: unusedStore(), listen: false, http: { host } });
      try {
        const res = await mint(h);
        assert.deepEqual([res.statusCode, res.json<{ code: string }>().code], [404, 'CP_ERR_HTTP_NOT_FOUND'], host);
        assert.doesNotMatch(res.body, /"token"/, 'nothing minted');
      } finally {
        await h.close();
      }
    }
    const off = await startHarness({ store: unusedStore(), listen: false, standalone: { devTokens: 'off' } });
    try {
      assert.equal((await mint(off)).statusCode, 404, 'DEV_TOKENS=off: not even on loopback');
    } finally {
      await off.close();
    }
    assert.deepEqual(devTokenDecision({ ...defaultConfig(), standalone: { ...defaultConfig().standalone, devTokens: 'off' } }), {
      served: false,
      reason: 'DEV_TOKENS=off',
    });
    assert.deepEqual(devTokenDecision(defaultConfig({ http: { host: '0.0.0.0' } })), {
      served: false,
      reason: 'HOST 0.0.0.0 is not loopback (DEV_TOKENS=auto; DEV_TOKENS=on serves them anyway)',
    });
    assert.equal(
      devTokenDecision(defaultConfig({ mode: 'cluster', standalone: { ...defaultConfig().standalone, devTokens: 'on' } })).served,
      false,
    );
    const on = await startHarness({ store: unusedStore(), listen: false, http: { host: '0.0.0.0' }, standalone: { devTokens: 'on' } });
    try {
      assert.equal((await mint(on)).statusCode, 200, 'DEV_TOKENS=on serves it on any HOST');
      assert.ok(
        on.logs.some((l) => l.level === 40 && /dev tokens \(POST \/v1\/tokens\/dev\): served: DEV_TOKENS=on/.test(String(l.msg))),
        JSON.stringify(on.logs),
      );
    } finally {
      await on.close();
    }
  });

  it('dev tokens - the route does not exist in cluster mode', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false, mode: 'cluster' });
    try {
      const res = await h.gateway.app.inject({ method: 'POST', url: '/v1/tokens/dev', payload: { channel: 'demo' } });
      assert.equal(res.statusCode, 404);
    } finally {
      await h.close();
    }
  });

  it('ws - /v1/ws without an upgrade is 426; an upgrade on another path is 404', async () => {
    const h = await startHarness({ store: unusedStore() });
    try {
      assert.equal((await h.gateway.app.inject({ url: '/v1/ws' })).statusCode, 426);
      const c = new Client(`ws://127.0.0.1:${h.port}/elsewhere`);
      const refused = await c.refused;
      assert.equal(refused.status, 404);
      assert.equal(h.gateway.stats().sockets, 0);
    } finally {
      await h.close();
    }
  });
});

describe('gateway http - listen', () => {
  it('PORT taken by another process is CP_ERR_CONFIG_INVALID naming PORT and the address; the gateway does not serve', async () => {
    const other = createServer();
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const taken = (other.address() as AddressInfo).port;
    try {
      await assert.rejects(
        startHarness({ store: unusedStore(), http: { port: taken } }),
        (err: unknown) =>
          isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') &&
          err.message.includes(`PORT: 127.0.0.1:${taken} is in use by another process (EADDRINUSE)`),
      );
    } finally {
      other.close();
    }
  });
});

describe('gateway http - unknown routes', () => {
  it('an unknown route is 404 with the documented {code, message} body', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false });
    try {
      const res = await h.gateway.app.inject({ method: 'GET', url: '/nope?x=1' });
      assert.equal(res.statusCode, 404);
      assert.deepEqual(res.json(), { code: 'CP_ERR_HTTP_NOT_FOUND', message: 'no route GET /nope' });
    } finally {
      await h.close();
    }
  });

  it('a known path asked with another method is 405 with an Allow header; nothing is served and the refusal is counted', async () => {
    const h = await startHarness({ store: unusedStore(), listen: false });
    try {
      const refused = async (): Promise<number> =>
        metricValue(await h.metricsText(), 'crowdplay_refusals_total', { reason: 'CP_ERR_HTTP_METHOD_NOT_ALLOWED' });
      const before = await refused();
      for (const [method, url, allow] of [
        ['DELETE', '/healthz', 'GET'],
        ['POST', '/v1/channels/demo/rounds?limit=5', 'GET'],
        ['PUT', '/v1/watch-tokens', 'POST, GET'],
        ['GET', '/v1/watch-tokens/w1', 'DELETE'],
      ] as const) {
        const res = await h.gateway.app.inject({ method, url });
        assert.equal(res.statusCode, 405, `${method} ${url}`);
        assert.equal(res.headers.allow, allow, `${method} ${url}`);
        assert.deepEqual(res.json(), {
          code: 'CP_ERR_HTTP_METHOD_NOT_ALLOWED',
          message: `method ${method} is not allowed on this path; it takes ${allow}`,
        });
      }
      assert.equal((await refused()) - before, 4);
      // A path under a known one that no route serves is still 404.
      const deeper = await h.gateway.app.inject({ method: 'GET', url: '/v1/watch-tokens/w1/extra' });
      assert.equal(deeper.statusCode, 404);
    } finally {
      await h.close();
    }
  });
});

/** What a raw HTTP/1.1 connection got back: the status, the headers (lower-case names), the JSON body, and how long the server kept it open. */
interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: { code?: string; message?: string };
  openMs: number;
}

/**
 * Writes `head` on a new connection to `port`; with `trickle`, one more byte every 20 ms after it (a client that keeps
 * sending, too slowly); with `end`, ends its side at once (a client that goes away mid-request). Resolves with every
 * byte the server sent once it closed the connection, and how long that took.
 */
function rawExchange(port: number, head: string, o: { trickle?: boolean; end?: boolean } = {}): Promise<{ text: string; openMs: number }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1', () => (o.end ? socket.end(head) : socket.write(head)));
    const timer = o.trickle ? setInterval(() => socket.writable && socket.write(' '), 20) : undefined;
    socket.on('data', (d) => chunks.push(d));
    socket.on('error', () => undefined); // a reset after the answer: what arrived is what counts
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ text: Buffer.concat(chunks).toString('utf8'), openMs: Date.now() - started });
    });
  });
}

/** {@link rawExchange} of one request that must get exactly one HTTP answer, parsed. */
async function rawRequest(port: number, head: string, trickle = false): Promise<RawAnswer> {
  const { text, openMs } = await rawExchange(port, head, { trickle });
  const m = /^HTTP\/1\.1 (\d{3}) /.exec(text);
  if (!m) throw new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`);
  assert.equal(text.match(/HTTP\/1\.1 \d{3} /g)?.length, 1, `one answer: ${JSON.stringify(text.slice(0, 400))}`);
  const split = text.indexOf('\r\n\r\n');
  const headers: Record<string, string> = {};
  for (const line of text.slice(0, split).split('\r\n').slice(1)) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  const body = text.slice(split + 4);
  return { status: Number(m[1]), headers, body: body ? (JSON.parse(body) as RawAnswer['body']) : {}, openMs };
}

describe('gateway http - request deadline (HTTP_REQUEST_TIMEOUT_MS)', () => {
  const SLOW_BODY = 'POST /v1/tokens/dev HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{';

  it('a request still arriving at the deadline is answered 408 CP_ERR_LIMIT_REQUEST_TIMEOUT, closed and counted; a whole one is served', async () => {
    const h = await startHarness({ store: unusedStore(), http: { requestTimeoutMs: 200 } });
    try {
      const slowBody = await rawRequest(h.port, SLOW_BODY, true);
      assert.equal(slowBody.status, 408);
      assert.equal(slowBody.body.code, 'CP_ERR_LIMIT_REQUEST_TIMEOUT');
      assert.match(slowBody.body.message ?? '', /within 200 ms \(HTTP_REQUEST_TIMEOUT_MS\)/);
      assert.ok(slowBody.openMs >= 200, `not cut before the deadline: ${slowBody.openMs} ms`);
      // Headers that never end are held to the same deadline.
      const slowHead = await rawRequest(h.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ', true);
      assert.deepEqual([slowHead.status, slowHead.body.code], [408, 'CP_ERR_LIMIT_REQUEST_TIMEOUT']);
      const whole = await rawRequest(h.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      assert.deepEqual([whole.status, whole.body], [200, { status: 'ok' }]);
      // Each cut request is counted once, as a timeout: the route's body parser, which saw its body stop, counts nothing.
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'http', reason: 'CP_ERR_LIMIT_REQUEST_TIMEOUT' }), 2);
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'http' }), 2, 'nothing else counted');
      // The parser's answers carry the headers every answer carries.
      assert.deepEqual(
        [slowBody.headers['x-content-type-options'], slowBody.headers['referrer-policy'], slowBody.headers['content-security-policy']],
        ['nosniff', 'no-referrer', "default-src 'none'; frame-ancestors 'none'"],
      );
    } finally {
      await h.close();
    }
  });

  it('closed without an answer or a count: a connection that sends nothing, a client that goes away mid-request', async () => {
    const h = await startHarness({ store: unusedStore(), http: { requestTimeoutMs: 200 } });
    try {
      const idle = await rawExchange(h.port, '');
      assert.equal(idle.text, '', 'nothing written to a connection that asked nothing');
      assert.ok(idle.openMs >= 200, `closed at the deadline, not before: ${idle.openMs} ms`);
      const gone = await rawExchange(h.port, SLOW_BODY, { end: true });
      assert.equal(gone.text, '', 'nothing written to a client that left');
      const headGone = await rawExchange(h.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n', { end: true });
      assert.equal(headGone.text, '');
      const whole = await rawRequest(h.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      assert.equal(whole.status, 200);
      assert.equal(metricValue(await h.metricsText(), 'crowdplay_refusals_total', { area: 'http' }), 0, 'nothing counted');
    } finally {
      await h.close();
    }
  });

  it('an answer given before its body arrived (415 from the headers) closes the connection: no 408 follows it', async () => {
    const h = await startHarness({ store: unusedStore(), http: { requestTimeoutMs: 200 } });
    try {
      const early = await rawRequest(
        h.port,
        'POST /v1/tokens/dev HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 500\r\n\r\nx',
        true,
      );
      assert.deepEqual([early.status, early.body.code, early.headers.connection], [415, 'CP_ERR_PROTO_INVALID', 'close']);
      assert.ok(early.openMs < 200, `closed with the answer, not at the deadline: ${early.openMs} ms`);
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'http', reason: 'CP_ERR_LIMIT_REQUEST_TIMEOUT' }), 0);
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'http', reason: 'CP_ERR_PROTO_INVALID' }), 1);
    } finally {
      await h.close();
    }
  });

  it("headers over node's limit: 431 CP_ERR_PROTO_TOO_BIG; bytes that are not HTTP: 400 CP_ERR_PROTO_MALFORMED; both counted", async () => {
    const h = await startHarness({ store: unusedStore() });
    try {
      const big = await rawRequest(h.port, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
      assert.deepEqual([big.status, big.body.code], [431, 'CP_ERR_PROTO_TOO_BIG']);
      assert.match(big.body.message ?? '', /^headers larger than \d+ bytes$/);
      const garbage = await rawRequest(h.port, 'HELLO THERE\r\n\r\n');
      assert.deepEqual([garbage.status, garbage.body.code], [400, 'CP_ERR_PROTO_MALFORMED']);
      const text = await h.metricsText();
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'http', reason: 'CP_ERR_PROTO_TOO_BIG' }), 1);
      assert.equal(metricValue(text, 'crowdplay_refusals_total', { area: 'http', reason: 'CP_ERR_PROTO_MALFORMED' }), 1);
      assert.equal((await h.gateway.app.inject({ url: '/healthz' })).statusCode, 200, 'still serving');
    } finally {
      await h.close();
    }
  });

  it('the deadline is checked every quarter of it, between 25 ms and 1 s; a deadline under 100 ms is refused at start-up', () => {
    assert.equal(requestCheckIntervalMs(10_000), 1_000);
    assert.equal(requestCheckIntervalMs(2_000), 500);
    assert.equal(requestCheckIntervalMs(100), 25);
    assert.equal(defaultConfig().http.requestTimeoutMs, 10_000);
    assert.throws(
      () => loadConfig({ HTTP_REQUEST_TIMEOUT_MS: '50' }),
      (err: unknown) => isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') && /HTTP_REQUEST_TIMEOUT_MS/.test(err.message),
    );
  });
});

describe('gateway metrics - accept queue', () => {
  it('listenOverflows reads TcpExt ListenOverflows, undefined without the file', async () => {
    const { writeFileSync, mkdtempSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'netstat-'));
    const file = join(dir, 'netstat');
    writeFileSync(file, 'TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 42 43\nIpExt: InNoRoutes\nIpExt: 0\n');
    assert.equal(listenOverflows(file), 42);
    assert.equal(listenOverflows(join(dir, 'missing')), undefined);
  });
});
