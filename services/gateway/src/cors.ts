/**
 * CORS for embedding: a page on another origin listed in EMBED_ORIGINS (the origins that may also frame the viewer
 * page and the overlay: security-headers.ts) may load the hosted viewer client and call the viewer routes a widget
 * needs, without credentials (a viewer token travels in `Authorization`, never in a cookie). Only the paths in
 * {@link CORS_PATHS} and a channel's round history answer CORS, and only to a listed origin; the tenant's API-key routes (grants, balances, watch
 * tokens) never do: a browser must not hold an API key. Uses @fastify/cors (its preflight answers in onRequest,
 * before any route).
 */
import cors from '@fastify/cors';
import type { FastifyInstance } from 'fastify';

/** The paths a browser on an embedding origin may call: the hosted client, the dev-token exchange, the viewer's balance. */
export const CORS_PATHS: ReadonlySet<string> = new Set(['/sdk-viewer.js', '/v1/tokens/dev', '/v1/me/balance']);
/** A channel's round history (round-history.ts), which a viewer reads with its token. */
const ROUND_HISTORY_PATH = /^\/v1\/channels\/[A-Za-z0-9_-]{1,64}\/rounds$/;

/** True when `path` (without its query) answers CORS to a listed origin. */
export function isCorsPath(path: string): boolean {
  return CORS_PATHS.has(path) || ROUND_HISTORY_PATH.test(path);
}
/** How long a browser may cache a preflight answer, s. */
export const CORS_MAX_AGE_S = 600;

/**
 * A test of an `Origin` header against EMBED_ORIGINS' entries: scheme, host and port exactly (no port: the scheme's
 * default), host case-insensitive; `https://*.example.com` matches any subdomain of example.com, not example.com
 * itself (as CSP frame-ancestors does).
 */
export function embedOriginMatcher(origins: readonly string[]): (origin: string) => boolean {
  const patterns = origins.map((o) => {
    const m = /^(https?):\/\/(\*\.)?([^:]+)(:\d{1,5})?$/.exec(o);
    if (!m) throw new Error(`EMBED_ORIGINS: "${o}" is not an origin`);
    const host = m[3]!.replace(/\./g, '\\.');
    return new RegExp(`^${m[1]}://${m[2] ? '[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.' : ''}${host}${m[4] ?? ''}$`, 'i');
  });
  return (origin) => patterns.some((p) => p.test(origin));
}

/** Registers CORS on `app` for {@link CORS_PATHS} and the `embedOrigins`; nothing when the list is empty. */
export function registerCors(app: FastifyInstance, embedOrigins: readonly string[]): void {
  if (embedOrigins.length === 0) return;
  const allowed = embedOriginMatcher(embedOrigins);
  void app.register(cors, {
    delegator: (req, cb) => {
      const origin = req.headers.origin;
      const path = req.url.split('?')[0] ?? '';
      cb(null, {
        origin: isCorsPath(path) && typeof origin === 'string' && allowed(origin) ? origin : false,
        credentials: false,
        methods: ['GET', 'POST'],
        allowedHeaders: ['authorization', 'content-type'],
        maxAge: CORS_MAX_AGE_S,
      });
    },
  });
}
