/**
 * Security headers of the gateway's HTTP answers: every answer says
 * `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer` (an
 * overlay's URL carries its token), and every page a Content-Security-Policy
 * that allows exactly what it loads: its own scripts, its inline `<style>`
 * blocks by hash, connections to its own origin, and framing only by the
 * origins that may embed it. Answers that are not pages may not be framed and
 * load nothing.
 */
import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';

/** Who may frame a page: `embed` (same origin and EMBED_ORIGINS), `telegram` (same origin and Telegram's web client). */
export type FrameAncestors = 'embed' | 'telegram';

/** What one page loads besides its own origin's scripts. */
export interface PagePolicy {
  frame: FrameAncestors;
  /** Script URLs of other origins the page loads (Telegram's telegram-web-app.js on the Mini App). */
  scripts?: readonly string[];
}

/** Telegram's Mini App script, which the Mini App page loads (the only script from another origin). */
export const TELEGRAM_WEB_APP_SCRIPT = 'https://telegram.org/js/telegram-web-app.js';

/** Telegram's web client (web.telegram.org/k and /a) opens Mini Apps in an iframe. */
export const TELEGRAM_WEB_ORIGIN = 'https://web.telegram.org';

/** The policy of an answer that is not a page (JSON, scripts, Prometheus text): nothing loads, nothing frames it. */
export const NON_PAGE_CSP = "default-src 'none'; frame-ancestors 'none'";

/** One origin of EMBED_ORIGINS: scheme, host (a leading `*.` allowed), optional port. */
export const EMBED_ORIGIN_RE = /^https?:\/\/(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:\d{1,5})?$/;

/**
 * Splits EMBED_ORIGINS (origins separated by commas or spaces) into its origins.
 * @throws Error naming an entry that is not an origin (the setting's pattern refuses it at start-up first)
 */
export function parseEmbedOrigins(raw: string): string[] {
  const out = raw.split(/[\s,]+/).filter((o) => o !== '');
  for (const o of out) if (!EMBED_ORIGIN_RE.test(o)) throw new Error(`EMBED_ORIGINS: "${o}" is not an origin (https://host[:port])`);
  return out;
}

/** `'sha256-…'` sources of every inline `<style>` block of `html`, in order. */
export function inlineStyleHashes(html: string): string[] {
  const out: string[] = [];
  for (const m of html.matchAll(/<style>([\s\S]*?)<\/style>/g)) {
    out.push(`'sha256-${createHash('sha256').update(m[1]!, 'utf8').digest('base64')}'`);
  }
  return out;
}

/**
 * The Content-Security-Policy of a page: scripts from its origin (and `policy.scripts`), its inline styles by hash,
 * images from itself and data: URLs, fetches and WebSockets to its origin, no plugins, no `<base>`, forms to itself,
 * framed by its own origin plus `embedOrigins` (`embed`) or Telegram's web client (`telegram`).
 */
export function pageCsp(html: string, policy: PagePolicy, embedOrigins: readonly string[]): string {
  const ancestors = ["'self'", ...(policy.frame === 'embed' ? embedOrigins : [TELEGRAM_WEB_ORIGIN])];
  const styles = inlineStyleHashes(html);
  return [
    "default-src 'none'",
    `script-src ${["'self'", ...(policy.scripts ?? [])].join(' ')}`,
    `style-src ${["'self'", ...styles].join(' ')}`,
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    `frame-ancestors ${ancestors.join(' ')}`,
  ].join('; ');
}

/**
 * Adds `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer` to every answer of `app`, and
 * {@link NON_PAGE_CSP} to every answer whose route set no Content-Security-Policy of its own (pages set theirs).
 */
export function registerSecurityHeaders(app: FastifyInstance): void {
  app.addHook('onSend', async (_req, reply, payload) => {
    reply.header('x-content-type-options', 'nosniff');
    reply.header('referrer-policy', 'no-referrer');
    if (!reply.hasHeader('content-security-policy')) reply.header('content-security-policy', NON_PAGE_CSP);
    return payload;
  });
}
