/**
 * Standalone's dev-token route, `POST /v1/tokens/dev`: anyone who reaches it
 * gets a viewer token of the dev tenant, so the viewer page works without a
 * tenant backend. It is served only where nobody else reaches it: in
 * standalone mode with the gateway listening on a loopback address, unless
 * DEV_TOKENS says otherwise (`on`: any address, `off`: never). Never in
 * cluster mode. Start-up logs which and why.
 */
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { CHANNEL_ID_RE, CrowdplayError } from '@crowdplay/protocol';
import type { Config } from '@crowdplay/config';
import type { Telemetry } from '@crowdplay/telemetry';
import { isTelegramChannelId, TELEGRAM_VIEWER_PREFIX } from '@crowdplay/telegram';
import { mintDevToken } from './auth.ts';

/** Largest POST /v1/tokens/dev body, bytes. */
export const DEV_TOKEN_BODY_LIMIT_BYTES = 1_024;

/** True for an address only this machine reaches: `localhost`, 127.0.0.0/8, `::1` (also IPv4-mapped). */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) !== 6) return false;
  const n = new URL(`http://[${h}]/`).hostname; // normalised: [::1], [::ffff:7f00:1]
  return n === '[::1]' || /^\[::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}\]$/.test(n);
}

/** Whether the dev-token route is served, and the sentence start-up logs about it. */
export interface DevTokenDecision {
  served: boolean;
  reason: string;
}

/** Decides whether this gateway serves POST /v1/tokens/dev (the rules in the module comment). */
export function devTokenDecision(config: Pick<Config, 'mode' | 'http' | 'standalone'>): DevTokenDecision {
  const host = config.http.host;
  if (config.mode !== 'standalone') return { served: false, reason: 'cluster mode never serves them' };
  const setting = config.standalone.devTokens;
  if (setting === 'off') return { served: false, reason: 'DEV_TOKENS=off' };
  if (setting === 'on') return { served: true, reason: `DEV_TOKENS=on: anyone who reaches ${host} can mint a viewer token` };
  return isLoopbackHost(host)
    ? { served: true, reason: `HOST ${host} is loopback (DEV_TOKENS=auto)` }
    : { served: false, reason: `HOST ${host} is not loopback (DEV_TOKENS=auto; DEV_TOKENS=on serves them anyway)` };
}

/**
 * Registers POST /v1/tokens/dev on `app` when {@link devTokenDecision} says so, and logs the decision once
 * (a warning when the route is served on an address others reach).
 * Body `{channel, viewer?}` → `{token, viewer, channel}`.
 */
export function registerDevTokenRoute(app: FastifyInstance, config: Config, telemetry: Telemetry): DevTokenDecision {
  const decision = devTokenDecision(config);
  if (config.mode === 'standalone') {
    const line = `dev tokens (POST /v1/tokens/dev): ${decision.served ? 'served' : 'not served'}: ${decision.reason}`;
    if (decision.served && !isLoopbackHost(config.http.host)) telemetry.logger.warn({ devTokens: decision.served }, line);
    else telemetry.logger.info({ devTokens: decision.served }, line);
  }
  if (!decision.served) return decision;
  app.post('/v1/tokens/dev', { bodyLimit: DEV_TOKEN_BODY_LIMIT_BYTES }, async (req) => {
    const body = req.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['body must be a JSON object {channel, viewer?}']);
    }
    const unknown = Object.keys(body).find((k) => k !== 'channel' && k !== 'viewer');
    if (unknown !== undefined) throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`unknown field ${JSON.stringify(unknown.slice(0, 64))}`]);
    const { channel, viewer } = body as { channel?: unknown; viewer?: unknown };
    if (typeof channel !== 'string' || !CHANNEL_ID_RE.test(channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
    if (viewer !== undefined && typeof viewer !== 'string') throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['viewer must be a string']);
    // A Telegram chat's game is played through the Mini App (verified initData), never with a token anyone can mint.
    if (isTelegramChannelId(channel)) {
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['channel is a Telegram chat: its players join through the Mini App']);
    }
    if (viewer?.startsWith(TELEGRAM_VIEWER_PREFIX)) {
      throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`viewer ids starting ${TELEGRAM_VIEWER_PREFIX} are Telegram players'`]);
    }
    const id = viewer ?? `v-${randomBytes(6).toString('hex')}`;
    const token = await mintDevToken(config.standalone.tenantSecret, { viewer: id, channel });
    return { token, viewer: id, channel };
  });
  return decision;
}
