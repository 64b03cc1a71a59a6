/**
 * The gateway's HTTP routes (fastify): health, readiness, metrics (when asked), the viewer
 * web page and its SDK bundle, and standalone's dev-token endpoint.
 */
import { readFile } from 'node:fs/promises';
import { maxHeaderSize, STATUS_CODES } from 'node:http';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { CrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import type { Config } from '@crowdplay/config';
import type { Telemetry } from '@crowdplay/telemetry';
import { buildHostedViewer, hostedViewerBanner } from '../../../scripts/build-sdk.mjs';
import { registerCors } from './cors.ts';
import { DEV_TOKEN_BODY_LIMIT_BYTES, registerDevTokenRoute } from './dev-tokens.ts';
import { checkOverlayQuery, OVERLAY_PATH } from './overlay.ts';
import {
  NON_PAGE_CSP,
  pageCsp,
  parseEmbedOrigins,
  registerSecurityHeaders,
  TELEGRAM_WEB_APP_SCRIPT,
  type PagePolicy,
} from './security-headers.ts';

/** The viewer SDK entry bundled for browsers at GET /sdk-viewer.js when no prebuilt client is found. */
export const SDK_VIEWER_ENTRY = fileURLToPath(new URL('../../../libs/sdk-viewer/src/index.ts', import.meta.url));
/** The viewer SDK's package.json: its version goes in the banner of a client built here. */
export const SDK_VIEWER_PACKAGE = fileURLToPath(new URL('../../../libs/sdk-viewer/package.json', import.meta.url));
/**
 * The hosted viewer client prebuilt by scripts/build.mjs beside the product bundle (dist/sdk-viewer.js);
 * the build rewrites this URL to be relative to the bundle. Under the sources (tsx) it names a file that does not
 * exist, and GET /sdk-viewer.js bundles libs/sdk-viewer/src on its first request instead.
 */
export const SDK_VIEWER_PREBUILT = fileURLToPath(new URL('./sdk-viewer.js', import.meta.url));
/** Static files of the viewer page. */
export const PUBLIC_DIR = fileURLToPath(new URL('../public/', import.meta.url));
/** Prometheus text exposition content type. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** What the routes need from the gateway. */
export interface HttpContext {
  config: Config;
  telemetry: Telemetry;
  /** True when the gateway serves traffic (listening, not draining). */
  ready(): boolean;
  /** Lifecycle state for /readyz. */
  state(): string;
}

/**
 * Where the gateway serves the word puzzle's Telegram Mini App: the URL registered with @BotFather's
 * /newapp and opened by the bot's menu button is `<public URL>` + this (docs/guides/telegram-bot.md).
 */
export const MINI_APP_PATH = '/tg/';

/**
 * The Mini App's direct link without its start parameter, `https://t.me/<TELEGRAM_BOT_USERNAME>/<TELEGRAM_APP_NAME>`
 * (the bot's `/start` link adds `?startapp=<the chat's parameter>`); '' without TELEGRAM_BOT_TOKEN (no bot).
 */
export function miniAppLink(telegram: Pick<Config['telegram'], 'botToken' | 'botUsername' | 'appName'>): string {
  return telegram.botToken ? `https://t.me/${telegram.botUsername}/${telegram.appName}` : '';
}

/** The Mini App page's placeholder for {@link miniAppLink}: the page builds its share link from it. */
const APP_LINK_META = '<meta name="crowdplay-app-link" content="" />';

/**
 * The Mini App page with its direct link filled in. Both names match `[A-Za-z0-9_]` (their settings' patterns),
 * so the link needs no escaping; it is escaped all the same.
 * @throws Error when the page has no placeholder (a page edited without it would silently lose its share button)
 */
export function fillMiniAppPage(html: string, config: Config): string {
  if (!html.includes(APP_LINK_META)) throw new Error(`tg/index.html: no ${APP_LINK_META}`);
  const link = miniAppLink(config.telegram).replace(/[&"<>]/g, (c) => `&#${c.charCodeAt(0)};`);
  return html.replace(APP_LINK_META, `<meta name="crowdplay-app-link" content="${link}" />`);
}

/**
 * Static assets of the pages: path → file, content type, for a page what its CSP allows (security-headers.ts),
 * a check of its query string (throws a CrowdplayError answered as 400), and what the gateway fills in from its
 * settings (once, when the file is read).
 */
const STATIC: Record<
  string,
  { file: string; type: string; page?: PagePolicy; check?: (query: unknown) => void; fill?: (text: string, config: Config) => string }
> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8', page: { frame: 'embed' } },
  '/index.html': { file: 'index.html', type: 'text/html; charset=utf-8', page: { frame: 'embed' } },
  '/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  // The streamer overlay for OBS's browser source (docs/guides/embed.md).
  [OVERLAY_PATH]: {
    file: 'overlay.html',
    type: 'text/html; charset=utf-8',
    page: { frame: 'embed' },
    check: checkOverlayQuery,
  },
  '/overlay.js': { file: 'overlay.js', type: 'text/javascript; charset=utf-8' },
  // The word puzzle's Telegram Mini App (docs/telegram.md).
  [MINI_APP_PATH]: {
    file: 'tg/index.html',
    type: 'text/html; charset=utf-8',
    page: { frame: 'telegram', scripts: [TELEGRAM_WEB_APP_SCRIPT] },
    fill: fillMiniAppPage,
  },
  [`${MINI_APP_PATH}app.js`]: { file: 'tg/app.js', type: 'text/javascript; charset=utf-8' },
  [`${MINI_APP_PATH}rounds.js`]: { file: 'tg/rounds.js', type: 'text/javascript; charset=utf-8' },
};

/**
 * The message of a request refused by a route's querystring schema, naming the parameter: an unknown one
 * (`additionalProperties: false`), one given more than once (the parser makes it an array), else the validator's
 * own text. Names are shown at most 40 characters long. Undefined for any other error (its own message is used).
 */
export function queryValidationMessage(err: unknown, query: unknown): string | undefined {
  const e = err as {
    validation?: Array<{ keyword?: string; instancePath?: string; params?: Record<string, unknown> }>;
    validationContext?: string;
  };
  if (e.validationContext !== 'querystring' || !Array.isArray(e.validation) || e.validation.length === 0) return undefined;
  const first = e.validation[0]!;
  if (first.keyword === 'additionalProperties' && typeof first.params?.additionalProperty === 'string')
    return `unknown query parameter "${first.params.additionalProperty.slice(0, 40)}"`;
  const name = (first.instancePath ?? '').replace(/^\//, '').split('/')[0] ?? '';
  const value = typeof query === 'object' && query !== null ? (query as Record<string, unknown>)[name] : undefined;
  if (name !== '' && Array.isArray(value)) return `query parameter "${name.slice(0, 40)}" given more than once`;
  return undefined;
}

/** Longest path parameter, characters as sent (percent-encoded): viewer ids of up to 128 characters fit encoded. */
export const MAX_PARAM_LENGTH = 1_024;

/**
 * Fastify's `frameworkErrors`: what the router refuses before any route or the app's error handler runs, answered in
 * crowdplay's `{code, message}` shape rather than fastify's (which echoes the URL back). A path parameter longer than
 * MAX_PARAM_LENGTH: 414 `CP_ERR_PROTO_INVALID` (414 URI Too Long says what to shorten; the code is the catalogue's
 * for a request of the wrong shape); a path that does not decode: 400 `CP_ERR_PROTO_INVALID`. Neither echoes the URL.
 */
export function frameworkErrors(telemetry: Telemetry): (err: FastifyError, req: FastifyRequest, reply: FastifyReply) => void {
  return (err, _req, reply) => {
    const code: ErrorCode = 'CP_ERR_PROTO_INVALID';
    if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') {
      telemetry.refusals.refuse('http', code, { why: 'param length' });
      void reply.status(414).send({ code, message: `a path segment is longer than ${MAX_PARAM_LENGTH} characters` });
      return;
    }
    if (err.code === 'FST_ERR_BAD_URL') {
      telemetry.refusals.refuse('http', code, { why: 'bad url' });
      void reply.status(400).send({ code, message: 'the URL path is not valid percent-encoding' });
      return;
    }
    telemetry.logger.error({ err }, 'http request refused by the router');
    void reply.status(500).send({ code: 'CP_ERR_INTERNAL' satisfies ErrorCode, message: 'internal error' });
  };
}

/** How often node checks open requests against HTTP_REQUEST_TIMEOUT_MS: a quarter of it, at most 1 s (node's default is 30 s). */
export function requestCheckIntervalMs(requestTimeoutMs: number): number {
  return Math.min(1_000, Math.max(25, Math.floor(requestTimeoutMs / 4)));
}

/**
 * The node HTTP server options that give every request a deadline: the whole request, headers and body, within
 * `requestTimeoutMs` (HTTP_REQUEST_TIMEOUT_MS), checked every {@link requestCheckIntervalMs}. A connection
 * upgraded to a WebSocket leaves node's HTTP parser and is not bound by it.
 * @param requestTimeoutMs the deadline, ms (> 0)
 */
export function requestDeadlineOptions(requestTimeoutMs: number): {
  requestTimeout: number;
  headersTimeout: number;
  connectionsCheckingInterval: number;
} {
  return {
    requestTimeout: requestTimeoutMs,
    headersTimeout: requestTimeoutMs,
    connectionsCheckingInterval: requestCheckIntervalMs(requestTimeoutMs),
  };
}

/**
 * Fastify's `clientErrorHandler`: what node's HTTP parser refuses before any route runs, answered in crowdplay's
 * `{code, message}` shape with the headers every answer carries, counted in crowdplay_refusals_total{area="http"},
 * and the connection closed:
 * - a request not received whole within `requestTimeoutMs` (HTTP_REQUEST_TIMEOUT_MS) of the connection's opening, or
 *   of the previous answer on a kept-alive one: 408 `CP_ERR_LIMIT_REQUEST_TIMEOUT`;
 * - headers over node's `maxHeaderSize` (16 KiB): 431 `CP_ERR_PROTO_TOO_BIG`;
 * - anything else the parser cannot read: 400 `CP_ERR_PROTO_MALFORMED`.
 * Closed without an answer and not counted: a connection that sent nothing by the deadline (a browser's
 * preconnect), one its peer reset or ended in the middle of a request (the client went away, nothing was malformed),
 * and one already gone. One whose response has begun gets only the close. The operator listener (HEALTH_PORT,
 * services/cli/src/health.ts) answers its own the same way.
 */
export function clientErrors(
  telemetry: { refusals: Pick<Telemetry['refusals'], 'refuse'> },
  requestTimeoutMs: number,
): (err: Error & { code?: string }, socket: Duplex) => void {
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const sentNothing = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' && (socket as Duplex & { bytesRead?: number }).bytesRead === 0;
    if (sentNothing || err.code === 'HPE_INVALID_EOF_STATE') {
      socket.destroy();
      return;
    }
    let status: number;
    let code: ErrorCode;
    let message: string;
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      status = 408;
      code = 'CP_ERR_LIMIT_REQUEST_TIMEOUT';
      message = new CrowdplayError(code, [requestTimeoutMs]).message;
      telemetry.refusals.refuse('http', code, { limit: 'HTTP_REQUEST_TIMEOUT_MS', value: requestTimeoutMs });
    } else if (err.code === 'HPE_HEADER_OVERFLOW') {
      status = 431;
      code = 'CP_ERR_PROTO_TOO_BIG';
      message = `headers larger than ${maxHeaderSize} bytes`;
      telemetry.refusals.refuse('http', code, { why: 'headers' });
    } else {
      status = 400;
      code = 'CP_ERR_PROTO_MALFORMED';
      message = 'the request is not valid HTTP/1.1';
      telemetry.refusals.refuse('http', code, { why: err.code ?? 'parse' });
    }
    // As node's own handler: no answer on a socket whose response has begun (it would corrupt that response).
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
    if (socket.writable && !inFlight?.headersSent) {
      const body = JSON.stringify({ code, message });
      socket.write(
        `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n` +
          `Content-Security-Policy: ${NON_PAGE_CSP}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
}

function sendError(reply: FastifyReply, code: ErrorCode, err: CrowdplayError | string): FastifyReply {
  const e = typeof err === 'string' ? new CrowdplayError(code, [err]) : err;
  return reply.status(e.httpStatus).send({ code: e.code, message: e.message });
}

/** A registered route's method and the paths its URL pattern serves. */
interface KnownRoute {
  method: string;
  re: RegExp;
}

/**
 * The paths a route's URL pattern serves, as a RegExp: `:name` is one segment, `*` the rest of the path.
 * @param url a fastify route URL, e.g. `/v1/balances/:viewer`
 */
export function routePattern(url: string): RegExp {
  const segments = url
    .split('/')
    .map((seg) => (seg === '*' ? '.*' : seg.startsWith(':') ? '[^/]+' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${segments.join('/')}$`);
}

/**
 * Registers every route on `app`.
 *
 * - `GET /healthz` → 200 `{status:'ok'}` while the process runs.
 * - `GET /readyz` → 200 `{ready:true}` when serving, else 503 `{ready:false, state}`.
 * - `GET /metrics` → Prometheus text, only with METRICS_ON_PORT (else the HEALTH_PORT listener serves it).
 * - `GET /`, `/app.js` → the viewer page (read once, cached); `GET /tg/`, `/tg/app.js`, `/tg/rounds.js` → the word puzzle's Mini App
 *   (its direct link filled in: {@link fillMiniAppPage});
 *   `GET /overlay?channel=C…`, `/overlay.js` → the streamer overlay (its query checked: overlay.ts).
 * - `GET /sdk-viewer.js` → the hosted viewer client: the prebuilt file (SDK_VIEWER_PREBUILT), else libs/sdk-viewer
 *   bundled by esbuild on first request (cached; a failed read or build is retried next time).
 * - `GET /v1/ws` without an upgrade → 426.
 * - `POST /v1/tokens/dev` (dev-only: standalone on a loopback HOST, or DEV_TOKENS=on; dev-tokens.ts) → `{token}`.
 * - CORS for EMBED_ORIGINS on `/sdk-viewer.js`, `/v1/tokens/dev` and `/v1/me/balance` (cors.ts).
 * - A path no route serves → 404 CP_ERR_HTTP_NOT_FOUND; a path a route serves with another method (of the routes
 *   registered after this call too) → 405 CP_ERR_HTTP_METHOD_NOT_ALLOWED with an `Allow` header.
 */
export function registerRoutes(app: FastifyInstance, ctx: HttpContext): void {
  const { config, telemetry } = ctx;
  // Every body route takes JSON only: without this fastify's built-in text/plain parser hands the route a string,
  // refused as 400, where any type but application/json is 415 (docs/protocol.md).
  app.removeContentTypeParser('text/plain');
  registerSecurityHeaders(app);
  // Every route registered from here on (this module's and the other route modules'), for a 405 on a known path.
  const known: KnownRoute[] = [];
  app.addHook('onRoute', (r) => {
    for (const method of [r.method].flat())
      if (method !== 'HEAD' && method !== 'OPTIONS' && r.url !== '*') known.push({ method, re: routePattern(r.url) });
  });
  const embedOrigins = parseEmbedOrigins(config.http.embedOrigins);
  // A page on a listed origin may load the hosted client and call the viewer routes (cors.ts).
  registerCors(app, embedOrigins);

  // An answer sent before its request's body arrived whole (a 415 decided from the headers) ends the connection: the
  // rest of that body is never read, so no deadline or parse error of it follows on the same socket.
  app.addHook('onSend', async (req, reply, payload) => {
    if (!req.raw.complete) reply.header('connection', 'close');
    return payload;
  });

  app.setErrorHandler((err, req, reply) => {
    // The body stopped coming: the request deadline cut the connection (counted there) or the client went away.
    // Nobody reads an answer, and it is not a body the route refused. (A request read whole is destroyed too by the
    // time an async hook has run, so `destroyed` alone does not say the body stopped.)
    if ((err as { code?: string }).code === 'ECONNRESET' || (req.raw.destroyed && !req.raw.complete))
      return reply.status(400).send({ code: 'CP_ERR_PROTO_INVALID', message: 'the request ended before its body did' });
    if (err instanceof CrowdplayError) return sendError(reply, err.code, err);
    const status = (err as { statusCode?: number }).statusCode ?? 500;
    if (status === 413) {
      // The route's own limit (the dev token route's, the webhook's TELEGRAM_WEBHOOK_MAX_BODY_BYTES, …).
      const limit = req.routeOptions.bodyLimit ?? DEV_TOKEN_BODY_LIMIT_BYTES;
      telemetry.refusals.refuse('http', 'CP_ERR_PROTO_TOO_BIG', { url: req.routeOptions.url, limit });
      // The catalogue's message speaks of a socket's frame; over HTTP it is the request's body.
      return reply.status(413).send({ code: 'CP_ERR_PROTO_TOO_BIG' satisfies ErrorCode, message: `body larger than ${limit} bytes` });
    }
    if ((err as { code?: string }).code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      const type = String(req.headers['content-type'] ?? 'none').slice(0, 100);
      telemetry.refusals.refuse('http', 'CP_ERR_PROTO_INVALID', { url: req.routeOptions.url, why: 'content type' });
      return reply
        .status(415)
        .send({ code: 'CP_ERR_PROTO_INVALID', message: `send the body as JSON (Content-Type: application/json), not ${type}` });
    }
    if (status >= 400 && status < 500) {
      const code: ErrorCode =
        (err as { code?: string }).code === 'FST_ERR_CTP_INVALID_JSON_BODY' ? 'CP_ERR_PROTO_MALFORMED' : 'CP_ERR_PROTO_INVALID';
      // A route's schema is where its bounds live (a grant's points, a watch token's ttlS, …): a refusal by it is counted.
      telemetry.refusals.refuse('http', code, { url: req.routeOptions.url });
      return reply.status(status).send({
        code,
        message:
          code === 'CP_ERR_PROTO_MALFORMED'
            ? 'body is not valid JSON, or holds a __proto__ or constructor.prototype key'
            : (queryValidationMessage(err, req.query) ?? (err instanceof Error ? err.message : 'bad request')),
      });
    }
    telemetry.logger.error({ err }, 'http handler failed');
    return sendError(reply, 'CP_ERR_INTERNAL', new CrowdplayError('CP_ERR_INTERNAL'));
  });

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0] ?? '/';
    const allowed = [...new Set(known.filter((r) => r.re.test(path)).map((r) => r.method))];
    if (allowed.length === 0)
      return reply.status(404).send({ code: 'CP_ERR_HTTP_NOT_FOUND', message: `no route ${req.method} ${path.slice(0, 200)}` });
    telemetry.refusals.refuse('http', 'CP_ERR_HTTP_METHOD_NOT_ALLOWED', { url: path.slice(0, 200), method: req.method.slice(0, 16) });
    const e = new CrowdplayError('CP_ERR_HTTP_METHOD_NOT_ALLOWED', [req.method.slice(0, 16), allowed.join(', ')]);
    return reply.header('allow', allowed.join(', ')).status(e.httpStatus).send({ code: e.code, message: e.message });
  });

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (_req, reply) => {
    if (ctx.ready()) return { ready: true };
    return reply.status(503).send({ ready: false, state: ctx.state() });
  });

  if (config.http.metricsOnPort) {
    // Off by default: the metrics name channels, tenants' load and refusals; operators scrape HEALTH_PORT instead.
    app.get('/metrics', async (_req, reply) => {
      const text = await telemetry.metrics.prometheusText();
      return reply.type(PROMETHEUS_CONTENT_TYPE).send(text);
    });
  }

  // Each file read once (with its page's CSP, which hashes its inline styles); a failed read is retried next time.
  const files = new Map<string, Promise<{ bytes: Buffer; csp: string | undefined }>>();
  for (const [path, { file, type, page, check, fill }] of Object.entries(STATIC)) {
    app.get(path, async (req, reply) => {
      check?.(req.query);
      let body = files.get(path);
      if (!body) {
        body = readFile(join(PUBLIC_DIR, file)).then((read) => {
          const bytes = fill ? Buffer.from(fill(read.toString('utf8'), config), 'utf8') : read;
          return { bytes, csp: page ? pageCsp(bytes.toString('utf8'), page, embedOrigins) : undefined };
        });
        files.set(path, body);
        body.catch(() => files.delete(path));
      }
      const { bytes, csp } = await body;
      if (csp) reply.header('content-security-policy', csp);
      return reply.type(type).header('cache-control', 'no-cache').send(bytes);
    });
  }

  let bundle: Promise<string> | undefined;
  app.get('/sdk-viewer.js', async (_req, reply) => {
    if (!bundle) {
      const building = hostedSdkBundle();
      bundle = building;
      building.catch(() => {
        if (bundle === building) bundle = undefined;
      });
    }
    return reply
      .type('text/javascript; charset=utf-8')
      .header('cache-control', 'no-cache')
      .send(await bundle);
  });

  app.get('/v1/ws', async (_req, reply) =>
    reply
      .status(426)
      .header('upgrade', 'websocket')
      .send({ code: 'CP_ERR_PROTO_INVALID', message: 'GET /v1/ws needs a WebSocket upgrade' }),
  );

  registerDevTokenRoute(app, config, telemetry);
}

/**
 * The hosted viewer client's text: the file at `prebuilt` when it exists (the product bundle's), else
 * libs/sdk-viewer built here ({@link buildSdkBundle}).
 * @param prebuilt path of the prebuilt client. @defaultValue SDK_VIEWER_PREBUILT
 * @throws a read error other than a missing file, or the esbuild build error
 */
export async function hostedSdkBundle(prebuilt: string = SDK_VIEWER_PREBUILT): Promise<string> {
  try {
    return await readFile(prebuilt, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  return buildSdkBundle();
}

/**
 * Bundles libs/sdk-viewer for browsers (ESM) exactly as the product build does (scripts/build-sdk.mjs
 * `buildHostedViewer`: one set of build options, one banner). esbuild is imported on first use, so a gateway that
 * never serves the page never loads it.
 * @throws the esbuild build error, or a read error of the package's package.json
 */
export async function buildSdkBundle(): Promise<string> {
  try {
    return await buildHostedViewer();
  } finally {
    // esbuild keeps a helper process (which holds the event loop open) until stopped;
    // the bundle is built once, so stop it (a later call would start it again).
    await (await import('esbuild')).stop();
  }
}

/** The first line of the hosted viewer client (scripts/build-sdk.mjs `hostedViewerBanner`). */
export const sdkViewerBanner = hostedViewerBanner;
