/**
 * A channel's recent rounds over HTTP, newest first, with their results and,
 * for a viewer, that viewer's own figures per round (read from the ledger).
 *
 * `GET /v1/channels/:channel/rounds?limit=N&before=CURSOR` with
 * `Authorization: Bearer <viewer token | tenant API key>` →
 * `{ rounds: RoundSummary[], next? }`. A viewer token is checked as for the
 * WebSocket (the channel's tenant signed it); an API key must be the
 * channel's tenant's; a read-only watch token is refused (403 CP_ERR_AUTH_READ_ONLY). `next` is the cursor of the
 * following page.
 */
import type { FastifyInstance } from 'fastify';
import { CHANNEL_ID_RE, CrowdplayError, type RoundSummary } from '@crowdplay/protocol';
import { TransferKinds, type Ledger } from '@crowdplay/ledger';
import { parseRoundCursor, roundCursor, type RoundRow, type Store } from '@crowdplay/store';
import type { Telemetry } from '@crowdplay/telemetry';
import { bearer, fail, isApiKey, pageLimit, refuseWatchToken, tenantChannel, tenantOf } from './api-auth.ts';
import type { Authenticator } from './auth.ts';

/** Rounds per page when `limit` is absent. */
export const ROUND_HISTORY_DEFAULT_LIMIT = 20;
/** Most rounds per page. */
export const ROUND_HISTORY_MAX_LIMIT = 100;

export interface RoundHistoryContext {
  store: Store;
  /** Where a viewer's own figures are read (without one, the rounds come without `mine`). */
  ledger?: Ledger;
  auth: Authenticator;
  telemetry: Telemetry;
}

function summary(r: RoundRow): RoundSummary {
  const out: RoundSummary = {
    id: r.id,
    kind: r.kind,
    outcomes: r.outcomes,
    state: r.state,
    openedAt: r.openedAt,
    deadline: r.deadlineAt,
  };
  if (r.title !== null) out.title = r.title;
  if (r.labels !== null) out.labels = r.labels;
  if (r.winner !== null && r.outcomes[r.winner] !== undefined) out.winner = r.outcomes[r.winner];
  return out;
}

/** Registers `GET /v1/channels/:channel/rounds` on `app`. */
export function registerRoundHistoryRoutes(app: FastifyInstance, ctx: RoundHistoryContext): void {
  const { store, ledger, auth, telemetry } = ctx;
  app.get<{ Params: { channel: string }; Querystring: { limit?: string; before?: string } }>(
    '/v1/channels/:channel/rounds',
    {
      schema: {
        // An unknown or repeated parameter is a 400 naming it (http.ts), as on the other /v1 routes; the values are
        // checked below, with messages that say what each takes.
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { limit: { type: 'string' }, before: { type: 'string' } },
        },
      },
    },
    async (req, reply) => {
      try {
        const { channel } = req.params;
        if (!CHANNEL_ID_RE.test(channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
        const { limit: limitText, before: beforeText } = req.query;
        const limit = pageLimit(limitText, ROUND_HISTORY_DEFAULT_LIMIT, ROUND_HISTORY_MAX_LIMIT);
        const before = beforeText === undefined ? undefined : parseRoundCursor(beforeText);
        if (beforeText !== undefined && !before)
          throw new CrowdplayError('CP_ERR_PROTO_INVALID', ['before: a cursor from a previous page']);
        const credential = bearer(req);
        refuseWatchToken(credential);
        let viewer: { tenantId: string; viewer: string } | undefined;
        if (credential !== null && isApiKey(credential)) {
          await tenantChannel(store, (await tenantOf(req, store)).id, channel);
        } else {
          viewer = await auth.crowd(channel, credential);
        }
        const page = await store.rounds.listRecent(channel, { limit, ...(before ? { before } : {}) });
        const rounds = page.rows.map(summary);
        if (viewer && ledger) {
          const mine = await ledger.viewerRoundFlows(
            viewer.tenantId,
            viewer.viewer,
            page.rows.map((r) => r.uid),
            [TransferKinds.stake, TransferKinds.buy],
          );
          page.rows.forEach((r, i) => {
            const m = mine.get(r.uid);
            if (m) rounds[i]!.mine = { staked: m.staked, paid: m.paid, net: m.paid - m.staked };
          });
        }
        return page.next ? { rounds, next: roundCursor(page.next) } : { rounds };
      } catch (err) {
        return fail(reply, err, telemetry, 'rounds', 'viewer token or tenant API key');
      }
    },
  );
}
