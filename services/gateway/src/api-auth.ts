/**
 * What the `/v1` HTTP routes share: reading `Authorization: Bearer`, finding
 * the tenant of an API key, and answering a refusal in the JSON error shape
 * (`{code, message}` with the catalogue's HTTP status), counted.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CHANNEL_ID_RE, CrowdplayError, isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import { WATCH_TOKEN_PREFIX, type Store, type Tenant } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';

/** `Authorization: <scheme> <credentials>`: the scheme (a token, RFC 7235), then whitespace, then the rest. */
const AUTHORIZATION_RE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?:[ \t]+(.*))?$/s;

/**
 * The credential of `Authorization: Bearer <credential>`, or null when the header is absent, of another scheme or
 * empty. The scheme is case-insensitive (RFC 7235 §2.1): `bearer` and `BEARER` are Bearer.
 */
export function bearer(req: FastifyRequest): string | null {
  const m = authorization(req);
  if (!m || m.scheme.toLowerCase() !== 'bearer') return null;
  const v = m.rest.trim();
  return v === '' ? null : v;
}

/** The Authorization header split into its scheme and the rest, or null when absent or not of that shape. */
function authorization(req: FastifyRequest): { scheme: string; rest: string } | null {
  const h = req.headers.authorization;
  if (typeof h !== 'string') return null;
  const m = AUTHORIZATION_RE.exec(h.trim());
  return m ? { scheme: m[1]!, rest: m[2] ?? '' } : null;
}

/**
 * The message of CP_ERR_AUTH_MISSING on a `/v1` route whose bearer header carries `credential`: what to send, and
 * when the request sent another scheme (`Basic …`), that only Bearer is taken. The scheme is echoed at most 20
 * characters long.
 */
function missingCredentialsMessage(req: FastifyRequest, credential: string): string {
  const m = authorization(req);
  const other = m && m.scheme.toLowerCase() !== 'bearer' ? m.scheme.slice(0, 20) : null;
  return other === null
    ? `no credentials: send the header Authorization: Bearer <${credential}>`
    : `no credentials: the Authorization scheme ${other} is not accepted, the Bearer scheme is expected: send Authorization: Bearer <${credential}>`;
}

/** Three base64url parts joined by dots: a JWT (a viewer token), whatever it says. */
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/** True when `credential` has the shape of a tenant API key (`cpk_<tenant>_<hex>`), not of a viewer token. */
export function isApiKey(credential: string): boolean {
  return credential.startsWith('cpk_');
}

/**
 * Refuses a read-only watch token (`cpw_…`, what an overlay connects with) on a route that needs a viewer or a
 * tenant: CP_ERR_AUTH_READ_ONLY (403), answered by {@link fail} with a message naming what the route takes, so an
 * embedder knows what to send instead of reading "malformed token".
 * @throws CrowdplayError CP_ERR_AUTH_READ_ONLY when `credential` is a watch token
 */
export function refuseWatchToken(credential: string | null): void {
  if (credential?.startsWith(WATCH_TOKEN_PREFIX)) throw new CrowdplayError('CP_ERR_AUTH_READ_ONLY');
}

/** Tenants already found for a request (by {@link tenantFirst}'s hook), so its handler does not look again. */
const tenantsOfRequests = new WeakMap<FastifyRequest, Tenant>();

/**
 * The tenant whose API key the request carries.
 * @throws CrowdplayError CP_ERR_AUTH_MISSING (no bearer credential), CP_ERR_AUTH_INVALID (unknown key; a viewer
 *   token, named as such)
 */
export async function tenantOf(req: FastifyRequest, store: Store): Promise<Tenant> {
  const known = tenantsOfRequests.get(req);
  if (known) return known;
  const key = bearer(req);
  if (!key) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
  // A viewer's token (a JWT) sent where the tenant's key belongs: say so, not "unknown API key".
  if (!isApiKey(key) && JWT_SHAPE.test(key))
    throw new CrowdplayError('CP_ERR_AUTH_INVALID', [
      "a viewer token is not a tenant API key: this route takes the tenant's API key (cpk_…)",
    ]);
  const tenant = await store.tenants.byApiKey(key);
  if (!tenant) throw new CrowdplayError('CP_ERR_AUTH_INVALID', ['unknown API key']);
  tenantsOfRequests.set(req, tenant);
  return tenant;
}

/**
 * Route options of a tenant-key route with a schema: its `preValidation` hook finds the tenant ({@link tenantOf})
 * before the body or query is validated, so a caller without a valid key gets 401, never a 400 that describes the
 * route's schema. A refusal is answered by {@link fail}.
 * @param area the refusal counter's area; `credential` what the route's bearer header carries (see {@link fail})
 */
export function tenantFirst(
  store: Store,
  telemetry: Telemetry,
  area: string,
  credential: string,
): { preValidation: (req: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply | undefined> } {
  return {
    preValidation: async (req, reply) => {
      try {
        await tenantOf(req, store);
        return undefined;
      } catch (err) {
        return fail(reply, err, telemetry, area, credential);
      }
    },
  };
}

/**
 * Checks that `channel` is one of `tenantId`'s channels (a tenant-key route naming a channel).
 * @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID, CP_ERR_CHANNEL_UNKNOWN, CP_ERR_AUTH_FORBIDDEN_CHANNEL
 */
export async function tenantChannel(store: Store, tenantId: string, channel: string): Promise<void> {
  if (!CHANNEL_ID_RE.test(channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
  const row = await store.channels.get(channel);
  if (!row) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
  if (row.tenantId !== tenantId) throw new CrowdplayError('CP_ERR_AUTH_FORBIDDEN_CHANNEL', [channel]);
}

/**
 * Answers a refused request: a CrowdplayError with its status and code
 * (counted in `crowdplay_refusals_total{area}` when it is the caller's fault),
 * anything else as a logged 500 `CP_ERR_INTERNAL`. `credential` names what
 * the route's bearer header carries, for the CP_ERR_AUTH_MISSING message (the
 * catalogue's names the WebSocket query parameters).
 */
export function fail(reply: FastifyReply, err: unknown, telemetry: Telemetry, area: string, credential: string): FastifyReply {
  if (isCrowdplayError(err)) {
    if (err.httpStatus < 500) telemetry.refusals.refuse(area, err.code);
    const message =
      err.code === 'CP_ERR_AUTH_MISSING'
        ? missingCredentialsMessage(reply.request, credential)
        : err.code === 'CP_ERR_AUTH_READ_ONLY'
          ? `a watch token is read-only (it only watches a channel's socket): this route takes a ${credential}`
          : err.message;
    return reply.status(err.httpStatus).send({ code: err.code, message });
  }
  telemetry.logger.error({ err, area }, 'request failed');
  return reply.status(500).send({ code: 'CP_ERR_INTERNAL' satisfies ErrorCode, message: 'internal error' });
}

/**
 * A list route's `limit` query parameter: `fallback` when absent, else a whole number 1–`max`.
 * @throws CrowdplayError CP_ERR_PROTO_INVALID "limit: a whole number 1–max" for any other value
 */
export function pageLimit(text: string | undefined, fallback: number, max: number): number {
  if (text === undefined) return fallback;
  const limit = /^\d{1,3}$/.test(text) ? Number(text) : 0;
  if (limit < 1 || limit > max) throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`limit: a whole number 1–${max}`]);
  return limit;
}
