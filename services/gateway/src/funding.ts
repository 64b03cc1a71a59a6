/**
 * Funding over HTTP: a tenant grants points to its viewers and reads their
 * balances (authenticated with the tenant API key), and a viewer reads its
 * own balance (authenticated with its viewer token). Grants are ledger
 * transfers treasury → wallet (libs/ledger), committed before the answer.
 *
 * - `POST /v1/grants` `Authorization: Bearer <api key>`, body
 *   `{ viewer, points, id }` → 200 `{ viewer, points, balance, replayed }`.
 *   `id` is the caller's idempotency id (scoped to the tenant): the same id
 *   and fields again is a no-op (`replayed: true`), other fields → 409.
 * - `GET /v1/balances/:viewer` `Authorization: Bearer <api key>` → `{ viewer, balance }`.
 * - `GET /v1/me/balance?channel=C` `Authorization: Bearer <viewer token>` → `{ viewer, balance }`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Ledger } from '@crowdplay/ledger';
import { CHANNEL_ID_RE, CrowdplayError, isCrowdplayError, type ErrorCode, type WalletCredit } from '@crowdplay/protocol';
import type { Store, Tenant } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import type { Authenticator } from './auth.ts';

/** Largest single grant, points (a typo guard; balances themselves are bigint in Postgres). */
export const MAX_GRANT_POINTS = 1_000_000_000_000;

export interface FundingContext {
  store: Store;
  ledger: Ledger;
  auth: Authenticator;
  telemetry: Telemetry;
  /** Called after a grant committed (not for a replay), before the HTTP answer. */
  onGranted?: (credit: WalletCredit) => void;
}

const VIEWER_PATTERN = '^[^\\u0000-\\u001f\\u007f]{1,128}$';

function bearer(req: FastifyRequest): string | null {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || !h.startsWith('Bearer ')) return null;
  const v = h.slice('Bearer '.length).trim();
  return v === '' ? null : v;
}

/**
 * Answers a refused funding request. `credential` names what the route's
 * `Authorization: Bearer` header carries, for the CP_ERR_AUTH_MISSING message
 * (the catalogue's names the WebSocket query parameters).
 */
function fail(reply: FastifyReply, err: unknown, telemetry: Telemetry, credential: string): FastifyReply {
  if (isCrowdplayError(err)) {
    if (err.httpStatus < 500) telemetry.refusals.refuse('funding', err.code);
    const message =
      err.code === 'CP_ERR_AUTH_MISSING' ? `no credentials: send the header Authorization: Bearer <${credential}>` : err.message;
    return reply.status(err.httpStatus).send({ code: err.code, message });
  }
  telemetry.logger.error({ err }, 'funding request failed');
  return reply.status(500).send({ code: 'CP_ERR_INTERNAL' satisfies ErrorCode, message: 'internal error' });
}

async function tenantOf(req: FastifyRequest, store: Store): Promise<Tenant> {
  const key = bearer(req);
  if (!key) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
  const tenant = await store.tenants.byApiKey(key);
  if (!tenant) throw new CrowdplayError('CP_ERR_AUTH_INVALID', ['unknown API key']);
  return tenant;
}

/** Registers the funding routes on `app`. */
export function registerFundingRoutes(app: FastifyInstance, ctx: FundingContext): void {
  const { store, ledger, auth, telemetry } = ctx;
  const granted = telemetry.metrics.counter('crowdplay_granted_points_total');

  app.post<{ Body: { viewer: string; points: number; id: string } }>(
    '/v1/grants',
    {
      bodyLimit: 4_096,
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['viewer', 'points', 'id'],
          properties: {
            viewer: { type: 'string', pattern: VIEWER_PATTERN },
            points: { type: 'integer', minimum: 1, maximum: MAX_GRANT_POINTS },
            id: { type: 'string', pattern: '^[A-Za-z0-9_.:-]{1,128}$' },
          },
        },
      },
    },
    async (req, reply) => {
      try {
        const tenant = await tenantOf(req, store);
        const { viewer, points, id } = req.body;
        const r = await ledger.grant(tenant.id, viewer, points, `grant:${tenant.id}:${id}`);
        if (!r.replayed) granted.add(points, { tenant: tenant.id });
        const balance = r.toBalance ?? (await ledger.balance(tenant.id, { kind: 'wallet', owner: viewer }));
        // Before the 200: a stake the caller's viewer sends next finds the grant in its shard's mirror.
        if (!r.replayed) ctx.onGranted?.({ tenant: tenant.id, viewer, points, balance });
        return { viewer, points, balance, replayed: r.replayed };
      } catch (err) {
        return fail(reply, err, telemetry, 'tenant API key');
      }
    },
  );

  app.get<{ Params: { viewer: string } }>('/v1/balances/:viewer', async (req, reply) => {
    try {
      const tenant = await tenantOf(req, store);
      const viewer = req.params.viewer;
      if (!new RegExp(VIEWER_PATTERN).test(viewer))
        throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['viewer: 1–128 characters, no control characters']);
      return { viewer, balance: await ledger.balance(tenant.id, { kind: 'wallet', owner: viewer }) };
    } catch (err) {
      return fail(reply, err, telemetry, 'tenant API key');
    }
  });

  app.get<{ Querystring: { channel?: string } }>('/v1/me/balance', async (req, reply) => {
    try {
      const token = bearer(req);
      const channel = req.query.channel ?? '';
      if (!CHANNEL_ID_RE.test(channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
      const id = await auth.crowd(channel, token);
      return { viewer: id.viewer, balance: await ledger.balance(id.tenantId, { kind: 'wallet', owner: id.viewer }) };
    } catch (err) {
      return fail(reply, err, telemetry, 'viewer token');
    }
  });
}
