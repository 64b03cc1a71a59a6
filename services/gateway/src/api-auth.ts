/**
 * What the `/v1` HTTP routes share: reading `Authorization: Bearer`, finding
 * the tenant of an API key, and answering a refusal in the JSON error shape
 * (`{code, message}` with the catalogue's HTTP status), counted.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CrowdplayError, isCrowdplayError, type ErrorCode } from '@crowdplay/protocol';
import type { Store, Tenant } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';

/** The credential of `Authorization: Bearer <credential>`, or null when the header is absent, of another scheme or empty. */
export function bearer(req: FastifyRequest): string | null {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || !h.startsWith('Bearer ')) return null;
  const v = h.slice('Bearer '.length).trim();
  return v === '' ? null : v;
}

/** True when `credential` has the shape of a tenant API key (`cpk_<tenant>_<hex>`), not of a viewer token. */
export function isApiKey(credential: string): boolean {
  return credential.startsWith('cpk_');
}

/**
 * The tenant whose API key the request carries.
 * @throws CrowdplayError CP_ERR_AUTH_MISSING (no bearer credential), CP_ERR_AUTH_INVALID (unknown key)
 */
export async function tenantOf(req: FastifyRequest, store: Store): Promise<Tenant> {
  const key = bearer(req);
  if (!key) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
  const tenant = await store.tenants.byApiKey(key);
  if (!tenant) throw new CrowdplayError('CP_ERR_AUTH_INVALID', ['unknown API key']);
  return tenant;
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
      err.code === 'CP_ERR_AUTH_MISSING' ? `no credentials: send the header Authorization: Bearer <${credential}>` : err.message;
    return reply.status(err.httpStatus).send({ code: err.code, message });
  }
  telemetry.logger.error({ err, area }, 'request failed');
  return reply.status(500).send({ code: 'CP_ERR_INTERNAL' satisfies ErrorCode, message: 'internal error' });
}
