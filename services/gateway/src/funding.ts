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
 *   The points count towards the tenant's grant points per UTC day
 *   (TENANT_MAX_GRANT_POINTS_PER_DAY or its override), reserved exactly in
 *   Postgres before the transfer: over it → 429 `CP_ERR_TENANT_QUOTA`, nothing
 *   granted. A replay is not counted (its reservation is given back).
 * - `GET /v1/balances/:viewer` `Authorization: Bearer <api key>` → `{ viewer, balance }`.
 * - `GET /v1/me/balance?channel=C` `Authorization: Bearer <viewer token>` → `{ viewer, balance }` (no `channel`:
 *   400 CP_ERR_PROTO_INVALID; a watch token: 403 CP_ERR_AUTH_READ_ONLY; a tenant API key: 401 CP_ERR_AUTH_INVALID
 *   naming `/v1/balances/:viewer`).
 */
import type { FastifyInstance } from 'fastify';
import type { Ledger } from '@crowdplay/ledger';
import { CHANNEL_ID_RE, CrowdplayError, isCrowdplayError, type WalletCredit } from '@crowdplay/protocol';
import { TenantQuotaError, utcDay, type Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import { bearer, fail, isApiKey, refuseWatchToken, tenantFirst, tenantOf } from './api-auth.ts';
import { isViewerId, MAX_VIEWER_ID_CHARS, type Authenticator } from './auth.ts';
import type { TenantQuotas } from './tenant-quotas.ts';

/** Largest single grant, points (a typo guard; balances themselves are bigint in Postgres). */
export const MAX_GRANT_POINTS = 1_000_000_000_000;

export interface FundingContext {
  store: Store;
  ledger: Ledger;
  auth: Authenticator;
  telemetry: Telemetry;
  /** The tenants' quotas (the grant points per day's default and the refusal counter). */
  quotas: TenantQuotas;
  /** The clock of the UTC day the grant points count towards (default: Date.now). */
  now?: () => number;
  /** Called after a grant committed (not for a replay), before the HTTP answer. */
  onGranted?: (credit: WalletCredit) => void;
}

/** The refusal of a viewer id the WebSocket would not take as a token's `sub` (auth.ts `isViewerId`: UTF-16 units, as the ledger counts). */
function checkViewer(viewer: string): void {
  if (!isViewerId(viewer)) {
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`viewer: 1–${MAX_VIEWER_ID_CHARS} characters, no control characters`]);
  }
}

/** Registers the funding routes on `app`. */
export function registerFundingRoutes(app: FastifyInstance, ctx: FundingContext): void {
  const { store, ledger, auth, telemetry } = ctx;
  const granted = telemetry.metrics.counter('crowdplay_granted_points_total');

  app.post<{ Body: { viewer: string; points: number; id: string } }>(
    '/v1/grants',
    {
      ...tenantFirst(store, telemetry, 'funding', 'tenant API key'),
      bodyLimit: 4_096,
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['viewer', 'points', 'id'],
          properties: {
            // The schema counts code points; checkViewer then counts UTF-16 units, as the WebSocket and the ledger do.
            viewer: { type: 'string', pattern: '^[^\\u0000-\\u001f\\u007f]{1,128}$' },
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
        checkViewer(viewer);
        const transferId = `grant:${tenant.id}:${id}`;
        const day = utcDay(new Date((ctx.now ?? Date.now)()));
        const reservation = await store.quotas.reserveGrantPoints(tenant.id, points, ctx.quotas.defaults.grantPointsPerDay, day);
        // A repeat of a grant that committed is a replay (or a 409), whatever the day's figure is now.
        if (!reservation.allowed && !(await store.quotas.transferExists(transferId))) {
          ctx.quotas.refuse('funding', tenant.id, 'grantPointsPerDay', { points, used: reservation.used, limit: reservation.limit });
          const err = new TenantQuotaError(tenant.id, 'grantPointsPerDay', reservation.limit);
          return reply.status(err.httpStatus).send({ code: err.code, message: err.message });
        }
        const giveBack = async (): Promise<void> => {
          if (!reservation.allowed) return;
          await store.quotas.releaseGrantPoints(tenant.id, points, day).catch((err: unknown) => {
            telemetry.logger.warn({ err, tenant: tenant.id, points, day }, 'grant points not given back to the quota');
          });
        };
        let r;
        try {
          r = await ledger.grant(tenant.id, viewer, points, transferId);
        } catch (err) {
          // Refused (nothing written): the points go back. Unknown outcome (the store went away): they stay counted.
          if (isCrowdplayError(err) && err.code !== 'CP_ERR_STORE_UNAVAILABLE') await giveBack();
          throw err;
        }
        if (r.replayed) await giveBack();
        else granted.add(points, { tenant: tenant.id });
        const balance = r.toBalance ?? (await ledger.balance(tenant.id, { kind: 'wallet', owner: viewer }));
        // Before the 200: a stake the caller's viewer sends next finds the grant in its shard's mirror.
        if (!r.replayed) ctx.onGranted?.({ tenant: tenant.id, viewer, points, balance });
        return { viewer, points, balance, replayed: r.replayed };
      } catch (err) {
        return fail(reply, err, telemetry, 'funding', 'tenant API key');
      }
    },
  );

  app.get<{ Params: { viewer: string } }>('/v1/balances/:viewer', async (req, reply) => {
    try {
      const tenant = await tenantOf(req, store);
      const viewer = req.params.viewer;
      checkViewer(viewer);
      return { viewer, balance: await ledger.balance(tenant.id, { kind: 'wallet', owner: viewer }) };
    } catch (err) {
      return fail(reply, err, telemetry, 'funding', 'tenant API key');
    }
  });

  app.get<{ Querystring: { channel?: string } }>('/v1/me/balance', async (req, reply) => {
    try {
      const token = bearer(req);
      const channel = req.query.channel;
      if (channel === undefined || channel === '')
        throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['query parameter channel is required: GET /v1/me/balance?channel=<channel id>']);
      if (!CHANNEL_ID_RE.test(channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
      refuseWatchToken(token);
      // A tenant's key read as a viewer token would be "malformed token": name the route the key belongs to instead.
      if (token !== null && isApiKey(token))
        throw new CrowdplayError('CP_ERR_AUTH_INVALID', [
          "a tenant API key is not a viewer token: this route takes a viewer's token; with the key, read a viewer's balance at GET /v1/balances/:viewer",
        ]);
      const id = await auth.crowd(channel, token);
      return { viewer: id.viewer, balance: await ledger.balance(id.tenantId, { kind: 'wallet', owner: id.viewer }) };
    } catch (err) {
      return fail(reply, err, telemetry, 'funding', 'viewer token');
    }
  });
}
