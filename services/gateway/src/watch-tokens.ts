/**
 * Read-only watch tokens: what a stream overlay (OBS's browser source) or any embed that only watches connects
 * with. A tenant mints, lists and revokes them with its API key (`Authorization: Bearer <API key>`, as
 * POST /v1/grants):
 *
 * - `POST /v1/watch-tokens` `{channel, ttlS?, label?}` → 201 `{id, token, channel, label, createdAt, expiresAt}`
 *   (the token's text is shown this once; the store keeps its hash).
 * - `GET /v1/watch-tokens?channel=C&after=ID&limit=N` → `{tokens: [...], next}`, by id, at most 100 a page.
 * - `DELETE /v1/watch-tokens/:id` → `{id, channel, revokedAt}`; every gateway closes the sockets open with it.
 *
 * A socket opens with one as a viewer does (`role=crowd&channel=C&token=cpw_…`): it gets the welcome (with
 * `readOnly: true`, no viewer), the channel's updates and rounds, but no join (no wallet, no welcome grant), and
 * every frame it sends is refused with CP_ERR_AUTH_READ_ONLY. Revocation reaches every gateway as a bus message
 * (`watch.revoked`); each gateway also re-reads its open watch sockets' tokens every WATCH_TOKEN_RECHECK_MS (a lost
 * message, an expiry), so a revoked token's sockets close within that.
 */
import type { FastifyInstance } from 'fastify';
import { CrowdplayError, labelProblem, type ErrorCode } from '@crowdplay/protocol';
import type { Config } from '@crowdplay/config';
import { decodeJson, encodeJson, type Bus, type Subjects, type Subscription } from '@crowdplay/bus';
import { isWatchToken, type Store, type WatchToken } from '@crowdplay/store';
import type { Logger, Telemetry } from '@crowdplay/telemetry';
import type { Conn } from './connection.ts';
import { fail, pageLimit, tenantChannel, tenantFirst, tenantOf } from './api-auth.ts';

/** Largest page of GET /v1/watch-tokens. */
export const WATCH_TOKEN_PAGE_MAX = 100;
/** Longest label, code points (also refused: blank, invisible, control or bidi-override characters: labelProblem). */
export const WATCH_TOKEN_LABEL_MAX = 100;
/** A token id as minted (`wt_` + base64url). */
const WATCH_ID_RE = /^wt_[A-Za-z0-9_-]{1,64}$/;

/** What the routes need. */
export interface WatchTokenRoutesContext {
  config: Config;
  store: Store;
  telemetry: Telemetry;
  /** Called after a revocation committed (tells every gateway). */
  onRevoked: (id: string) => void;
}

/** A token as the routes show it (never its text, except once when minted). */
function shown(t: WatchToken, now = Date.now()): Record<string, unknown> {
  return {
    id: t.id,
    channel: t.channel,
    label: t.label,
    createdAt: t.createdAt.toISOString(),
    expiresAt: t.expiresAt.toISOString(),
    revokedAt: t.revokedAt?.toISOString() ?? null,
    state: t.revokedAt ? 'revoked' : t.expiresAt.getTime() <= now ? 'expired' : 'live',
  };
}

/** Registers the watch-token routes on `app` (module comment). */
export function registerWatchTokenRoutes(app: FastifyInstance, ctx: WatchTokenRoutesContext): void {
  const { config, store, telemetry } = ctx;
  const maxTtlS = config.gateway.watchTokenMaxTtlS;
  const defaultTtlS = Math.min(config.gateway.watchTokenDefaultTtlS, maxTtlS);

  app.post<{ Body: { channel: string; ttlS?: number; label?: string } }>(
    '/v1/watch-tokens',
    {
      ...tenantFirst(store, telemetry, 'watch', 'tenant API key'),
      bodyLimit: 4_096,
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['channel'],
          properties: {
            // Its id is checked by tenantChannel: a bad one is CP_ERR_CHANNEL_INVALID_ID, as on every route.
            channel: { type: 'string' },
            ttlS: { type: 'integer', minimum: 1, maximum: maxTtlS },
            label: { type: 'string', maxLength: WATCH_TOKEN_LABEL_MAX, pattern: '^[^\\u0000-\\u001f\\u007f]*$' },
          },
        },
      },
    },
    async (req, reply) => {
      try {
        const tenant = await tenantOf(req, store);
        const { channel, ttlS = defaultTtlS, label = '' } = req.body;
        // A label is shown to the tenant as text: the rules of round and action labels (no bidi overrides, not blank).
        const why = label === '' ? undefined : labelProblem(label, WATCH_TOKEN_LABEL_MAX);
        if (why) throw new CrowdplayError('CP_ERR_LABEL_INVALID', ['/label', why]);
        await tenantChannel(store, tenant.id, channel);
        const max = config.gateway.watchTokenMaxPerChannel;
        if ((await store.watchTokens.countLive(tenant.id, channel)) >= max)
          throw new CrowdplayError('CP_ERR_WATCH_TOO_MANY', [channel, max]);
        const { row, token } = await store.watchTokens.create(tenant.id, channel, ttlS, label);
        const { state: _state, revokedAt: _revokedAt, ...fields } = shown(row);
        return reply.status(201).send({ ...fields, token });
      } catch (err) {
        return fail(reply, err, telemetry, 'watch', 'tenant API key');
      }
    },
  );

  app.get<{ Querystring: { channel?: string; after?: string; limit?: string } }>(
    '/v1/watch-tokens',
    {
      ...tenantFirst(store, telemetry, 'watch', 'tenant API key'),
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            // Its id is checked by tenantChannel: a bad one is CP_ERR_CHANNEL_INVALID_ID, as on every route.
            channel: { type: 'string' },
            after: { type: 'string', pattern: WATCH_ID_RE.source },
            // Checked in the handler, as the rounds route checks its own: one message for every bad value.
            limit: { type: 'string' },
          },
        },
      },
    },
    async (req, reply) => {
      try {
        const tenant = await tenantOf(req, store);
        const { channel, after } = req.query;
        const limit = pageLimit(req.query.limit, WATCH_TOKEN_PAGE_MAX, WATCH_TOKEN_PAGE_MAX);
        if (channel !== undefined) await tenantChannel(store, tenant.id, channel);
        // One more than the page: whether there is a next one.
        const rows = await store.watchTokens.list(tenant.id, {
          ...(channel !== undefined ? { channel } : {}),
          ...(after !== undefined ? { after } : {}),
          limit: limit + 1,
        });
        const page = rows.slice(0, limit);
        const now = Date.now();
        return { tokens: page.map((t) => shown(t, now)), next: rows.length > limit ? page.at(-1)!.id : null };
      } catch (err) {
        return fail(reply, err, telemetry, 'watch', 'tenant API key');
      }
    },
  );

  app.delete<{ Params: { id: string } }>('/v1/watch-tokens/:id', async (req, reply) => {
    try {
      const tenant = await tenantOf(req, store);
      const id = req.params.id;
      // Another tenant's token is as unknown as a made-up id: its existence is not told.
      if (!WATCH_ID_RE.test(id)) throw new CrowdplayError('CP_ERR_WATCH_UNKNOWN_TOKEN', [id.slice(0, 80)]);
      const row = await store.watchTokens.revoke(tenant.id, id);
      if (!row) throw new CrowdplayError('CP_ERR_WATCH_UNKNOWN_TOKEN', [id]);
      ctx.onRevoked(row.id);
      return { id: row.id, channel: row.channel, revokedAt: row.revokedAt?.toISOString() ?? null };
    } catch (err) {
      return fail(reply, err, telemetry, 'watch', 'tenant API key');
    }
  });
}

/** The bus payload of a revocation. */
interface Revocation {
  id: string;
}

/** What the socket side needs from the gateway. */
export interface WatchSocketsDeps {
  store: Store;
  bus: Bus;
  subjects: Subjects;
  logger: Logger;
  /** WATCH_TOKEN_RECHECK_MS. */
  recheckMs: number;
  /** Ends a socket whose token no longer holds (revoked, expired), counting the refusal. */
  end: (conn: Conn, code: ErrorCode) => void;
}

/**
 * The gateway's sockets open with watch tokens: authenticates them at connect and closes them when their token is
 * revoked (bus message) or found revoked or expired by the periodic re-check.
 */
export class WatchSockets {
  private readonly open = new Map<string, Set<Conn>>();
  private sub: Subscription | undefined;
  private timer: NodeJS.Timeout | undefined;
  private checking = false;

  constructor(private readonly deps: WatchSocketsDeps) {}

  /** Open sockets with a watch token. */
  get size(): number {
    let n = 0;
    for (const set of this.open.values()) n += set.size;
    return n;
  }

  /**
   * Authenticates `conn` when `token` is a watch token: sets its tenant, its `watchToken` and a viewer id of
   * `watch:<token id>` (logs only: a watch socket joins nothing).
   * @returns false when `token` is not a watch token (the caller authenticates a viewer)
   * @throws CrowdplayError CP_ERR_AUTH_INVALID (unknown token), CP_ERR_AUTH_REVOKED, CP_ERR_AUTH_EXPIRED,
   *   CP_ERR_AUTH_WRONG_CHANNEL (a token of another channel); store errors pass through
   */
  async authenticate(conn: Conn, token: string | null): Promise<boolean> {
    if (!isWatchToken(token)) return false;
    const row = await this.deps.store.watchTokens.byToken(token);
    if (!row) throw new CrowdplayError('CP_ERR_AUTH_INVALID', ['unknown watch token']);
    if (row.revokedAt) throw new CrowdplayError('CP_ERR_AUTH_REVOKED');
    if (row.expired) throw new CrowdplayError('CP_ERR_AUTH_EXPIRED');
    if (row.channel !== conn.channel) throw new CrowdplayError('CP_ERR_AUTH_WRONG_CHANNEL', [conn.channel]);
    conn.tenantId = row.tenantId;
    conn.viewer = `watch:${row.id}`;
    conn.watchToken = row.id;
    return true;
  }

  /** Subscribes to revocations and starts the re-check. */
  start(): void {
    this.sub = this.deps.bus.subscribe(this.deps.subjects.watchRevocations(), (msg) => {
      let r: Revocation;
      try {
        r = decodeJson<Revocation>(msg.data);
      } catch (err) {
        this.deps.logger.warn({ err }, 'undecodable watch revocation dropped');
        return;
      }
      if (typeof r.id === 'string') this.closeAll(r.id, 'CP_ERR_AUTH_REVOKED');
    });
    this.timer = setInterval(() => void this.recheck(), this.deps.recheckMs);
    this.timer.unref();
  }

  /** Tells every gateway (this one too) that token `id` was revoked. */
  announce(id: string): void {
    this.deps.bus.publish(this.deps.subjects.watchRevocations(), encodeJson({ id } satisfies Revocation));
  }

  /** A watch socket opened (welcome sent). */
  track(conn: Conn): void {
    const id = conn.watchToken;
    if (id === undefined) return;
    let set = this.open.get(id);
    if (!set) this.open.set(id, (set = new Set()));
    set.add(conn);
  }

  /** A socket closing (any socket; idempotent). */
  untrack(conn: Conn): void {
    const id = conn.watchToken;
    if (id === undefined) return;
    const set = this.open.get(id);
    if (set?.delete(conn) && set.size === 0) this.open.delete(id);
  }

  /** Re-reads the open sockets' tokens; closes those revoked (CP_ERR_AUTH_REVOKED) or expired or gone. Never rejects. */
  async recheck(): Promise<void> {
    if (this.checking || this.open.size === 0) return;
    this.checking = true;
    try {
      const ids = [...this.open.keys()];
      for (const t of await this.deps.store.watchTokens.inactive(ids))
        this.closeAll(t.id, t.reason === 'expired' ? 'CP_ERR_AUTH_EXPIRED' : 'CP_ERR_AUTH_REVOKED');
    } catch (err) {
      this.deps.logger.warn({ err }, 'watch token re-check failed; retried next interval');
    } finally {
      this.checking = false;
    }
  }

  private closeAll(id: string, code: ErrorCode): void {
    const set = this.open.get(id);
    if (!set) return;
    this.open.delete(id);
    for (const conn of set) this.deps.end(conn, code);
  }

  close(): void {
    this.sub?.unsubscribe();
    this.sub = undefined;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
