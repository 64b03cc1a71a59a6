/**
 * Authentication of WebSocket clients.
 *
 * - role=crowd: a viewer JWT (HS256) signed with the secret of the channel's
 *   tenant. The HMAC key is the UTF-8 bytes of the tenant's signing secret
 *   string. Claims: `sub` = viewer id (1–128 chars, required); `tid` (tenant
 *   id, optional, must equal the channel's tenant); `ch` (channel id, optional,
 *   must equal the channel); `exp`/`nbf` checked with TOKEN_CLOCK_SKEW_S.
 * - role=game: a tenant API key; the channel is created for that tenant on
 *   first use, and another tenant's channel is refused.
 *
 * Tenants and channel rows are cached for a few seconds (lru-cache with TTL;
 * concurrent look-ups of one key are collapsed into one query), so a
 * reconnect storm of a channel's viewers costs one query, not one per viewer.
 */
import { createSecretKey, type KeyObject } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { errors as joseErrors, jwtVerify, SignJWT } from 'jose';
import { CHANNEL_ID_RE, CrowdplayError } from '@crowdplay/protocol';
import type { ChannelRow, Store, Tenant } from '@crowdplay/store';
import { lruCountBound } from '@crowdplay/ratelimit';
import { isTelegramChannelId, TELEGRAM_VIEWER_PREFIX } from '@crowdplay/telegram';

/** How long tenants and known channels are cached, ms (a rotated secret takes effect within this). */
export const AUTH_CACHE_TTL_MS = 5_000;
/** How long an unknown channel is remembered as unknown, ms (short: a game may create it any moment). */
export const UNKNOWN_CHANNEL_TTL_MS = 1_000;
/** Entries per cache (tenants; channels): bounds memory under a flood of made-up ids. */
export const AUTH_CACHE_MAX_ENTRIES = 10_000;
/** Longest viewer id (`sub`), characters. */
export const MAX_VIEWER_ID_CHARS = 128;
/** Tenant id of standalone's dev tenant (created by the CLI with STANDALONE_TENANT_SECRET / _KEY). */
export const DEV_TENANT_ID = 'dev';
/** Lifetime of a dev token from POST /v1/tokens/dev, s. */
export const DEV_TOKEN_TTL_S = 3_600;

const utf8 = new TextEncoder();

/** The HS256 key of a tenant: the UTF-8 bytes of its signing secret. */
export function tenantKey(signingSecret: string): Uint8Array<ArrayBuffer> {
  return utf8.encode(signingSecret);
}

// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const CONTROL_RE = /[\u0000-\u001f\u007f]/;

/** A viewer id (token `sub`): 1–MAX_VIEWER_ID_CHARS characters, no control characters. */
export function isViewerId(v: string): boolean {
  return v.length >= 1 && v.length <= MAX_VIEWER_ID_CHARS && !CONTROL_RE.test(v);
}

/** An authenticated viewer. */
export interface CrowdIdentity {
  tenantId: string;
  viewer: string;
}

interface TenantEntry {
  tenant: Tenant | null;
  /** Made once per cache entry, not per verify. */
  key: KeyObject | undefined;
}

/**
 * The tenant's HS256 key as a node:crypto KeyObject. jose 5's Node build
 * verifies HMAC with node:crypto on the calling thread; jose 6 goes through
 * WebCrypto jobs, whose dispatch took 14 % of the gateway's CPU while it
 * ramped 1,500 connections/s (docs/benchmarks.md), so the gateway pins jose 5.
 */
export function importTenantKey(signingSecret: string): KeyObject {
  return createSecretKey(tenantKey(signingSecret));
}

interface ChannelEntry {
  row: ChannelRow | null;
}

/** Why jose refused a token, in words for the error frame (never the token itself). */
function joseReason(err: unknown): string {
  if (err instanceof joseErrors.JWTClaimValidationFailed) {
    if (err.claim === 'nbf' && err.reason === 'check_failed')
      return 'not valid yet: its nbf (not before) is later than now plus TOKEN_CLOCK_SKEW_S';
    return `claim ${err.claim} ${err.reason === 'missing' ? 'is missing' : err.reason === 'check_failed' ? 'failed its check' : 'is invalid'}`;
  }
  if (err instanceof joseErrors.JOSEError) {
    switch (err.code) {
      case 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED':
        return 'bad signature';
      case 'ERR_JOSE_ALG_NOT_ALLOWED':
        return 'algorithm not allowed (HS256 only)';
      case 'ERR_JWS_INVALID':
      case 'ERR_JWT_INVALID':
        return 'malformed token';
      default:
        return err.code;
    }
  }
  return 'unverifiable token';
}

/** Options of {@link Authenticator}. */
export interface AuthenticatorOptions {
  /** TOKEN_CLOCK_SKEW_S: tolerance on exp/nbf, s. */
  clockSkewS: number;
  /** Cache TTL, ms. @defaultValue {@link AUTH_CACHE_TTL_MS} */
  cacheTtlMs?: number;
  /** TENANT_MAX_CHANNELS: the channels a tenant may create unless it has an override. @defaultValue no limit */
  maxChannels?: number;
}

/** Verifies viewer tokens and game keys against the store (cached). */
export class Authenticator {
  private readonly tenants: LRUCache<string, TenantEntry>;
  private readonly channels: LRUCache<string, ChannelEntry>;
  private readonly clockSkewS: number;
  private readonly maxChannels: number | undefined;

  constructor(
    private readonly store: Store,
    opts: AuthenticatorOptions,
  ) {
    const ttl = opts.cacheTtlMs ?? AUTH_CACHE_TTL_MS;
    this.clockSkewS = opts.clockSkewS;
    this.maxChannels = opts.maxChannels;
    this.tenants = new LRUCache<string, TenantEntry>({
      ...lruCountBound(AUTH_CACHE_MAX_ENTRIES),
      ttl,
      fetchMethod: async (id) => {
        const tenant = await this.store.tenants.get(id);
        return { tenant, key: tenant ? importTenantKey(tenant.signingSecret) : undefined };
      },
    });
    this.channels = new LRUCache<string, ChannelEntry>({
      ...lruCountBound(AUTH_CACHE_MAX_ENTRIES),
      ttl,
      fetchMethod: async (id, _stale, { options }) => {
        const row = await this.store.channels.get(id);
        if (!row) options.ttl = Math.min(ttl, UNKNOWN_CHANNEL_TTL_MS);
        return { row };
      },
    });
  }

  /**
   * Authenticates a viewer of `channel` (already checked against CHANNEL_ID_RE).
   *
   * @throws CrowdplayError CP_ERR_AUTH_MISSING (no token), CP_ERR_CHANNEL_UNKNOWN,
   *   CP_ERR_AUTH_EXPIRED, CP_ERR_AUTH_INVALID (signature, claims, `sub`, `tid`),
   *   CP_ERR_AUTH_FORBIDDEN_CHANNEL (a `ch` claim naming another channel);
   *   store errors pass through.
   */
  async crowd(channel: string, token: string | null): Promise<CrowdIdentity> {
    if (!token) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    const ch = await this.channelRow(channel);
    if (!ch) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    const entry = await this.tenants.fetch(ch.tenantId);
    if (!entry?.tenant || !entry.key) throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, entry.key, {
        algorithms: ['HS256'],
        clockTolerance: this.clockSkewS,
        requiredClaims: ['exp'],
      }));
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw new CrowdplayError('CP_ERR_AUTH_EXPIRED', [], { cause: err });
      throw new CrowdplayError('CP_ERR_AUTH_INVALID', [joseReason(err)], { cause: err });
    }
    const sub = payload.sub;
    if (typeof sub !== 'string' || !isViewerId(sub)) {
      throw new CrowdplayError('CP_ERR_AUTH_INVALID', [
        `sub must be a viewer id of 1–${MAX_VIEWER_ID_CHARS} characters, no control characters`,
      ]);
    }
    // Telegram players' ids come only from verified initData (telegram-auth.ts): a token naming one would act as them.
    if (sub.startsWith(TELEGRAM_VIEWER_PREFIX)) {
      throw new CrowdplayError('CP_ERR_AUTH_INVALID', [`sub ${TELEGRAM_VIEWER_PREFIX}… is reserved for Telegram Mini App sessions`]);
    }
    if (payload.tid !== undefined && payload.tid !== ch.tenantId) {
      throw new CrowdplayError('CP_ERR_AUTH_INVALID', ["tid is not the channel's tenant"]);
    }
    if (payload.ch !== undefined && payload.ch !== channel) throw new CrowdplayError('CP_ERR_AUTH_WRONG_CHANNEL', [channel]);
    return { tenantId: ch.tenantId, viewer: sub };
  }

  /**
   * The channel's row (cached), or null. A game creating the channel sets the cache while a viewer's read is in
   * flight, which aborts that read ("replaced"): the value set is the answer then.
   * @throws the store's error
   */
  private async channelRow(channel: string): Promise<ChannelEntry['row']> {
    try {
      return (await this.channels.fetch(channel))?.row ?? null;
    } catch (err) {
      const set = this.channels.get(channel);
      if (set) return set.row;
      throw err;
    }
  }

  /**
   * Authenticates a multi-channel game connection: the key's tenant (its channels are checked as it attaches them).
   * @throws CrowdplayError CP_ERR_AUTH_MISSING (no key), CP_ERR_AUTH_INVALID (unknown key); store errors pass through.
   */
  async gameKey(key: string | null): Promise<{ tenantId: string }> {
    if (!key) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    const tenant = await this.store.tenants.byApiKey(key);
    if (!tenant) throw new CrowdplayError('CP_ERR_AUTH_INVALID', ['unknown API key']);
    return { tenantId: tenant.id };
  }

  /**
   * Authenticates a game connection for `channel`, creating the channel for
   * the key's tenant if it does not exist — unless it is a Telegram chat's
   * (`tg<id>`, `tgn<id>`, `tb<bot>_<id>`): a game never creates one, so no
   * tenant can take a chat's id before its bot's tenant does.
   *
   * @throws CrowdplayError CP_ERR_AUTH_MISSING (no key), CP_ERR_AUTH_INVALID (unknown key),
   *   CP_ERR_CHANNEL_UNKNOWN (a Telegram chat's channel that does not exist),
   *   CP_ERR_AUTH_FORBIDDEN_CHANNEL (another tenant's channel), CP_ERR_TENANT_QUOTA (a new channel over the
   *   tenant's channels quota: a TenantQuotaError); store errors pass through.
   */
  async game(channel: string, key: string | null): Promise<{ tenantId: string }> {
    if (!key) throw new CrowdplayError('CP_ERR_AUTH_MISSING');
    const tenant = await this.store.tenants.byApiKey(key);
    if (!tenant) throw new CrowdplayError('CP_ERR_AUTH_INVALID', ['unknown API key']);
    if (isTelegramChannelId(channel) && !(await this.store.channels.get(channel))) {
      throw new CrowdplayError('CP_ERR_CHANNEL_UNKNOWN', [channel]);
    }
    const row = await this.store.channels.ensure(channel, tenant.id, this.maxChannels);
    this.channels.set(channel, { row });
    return { tenantId: tenant.id };
  }
}

/**
 * Mints a viewer token for standalone's dev tenant (POST /v1/tokens/dev):
 * HS256, `sub` = viewer, `tid` = 'dev', `ch` = channel, `iat`, `exp` = now + ttlS.
 *
 * @param secret STANDALONE_TENANT_SECRET
 * @throws CrowdplayError CP_ERR_CHANNEL_INVALID_ID, CP_ERR_PROTO_INVALID (viewer id length or control characters)
 */
export async function mintDevToken(secret: string, opts: { viewer: string; channel: string; ttlS?: number }): Promise<string> {
  if (!CHANNEL_ID_RE.test(opts.channel)) throw new CrowdplayError('CP_ERR_CHANNEL_INVALID_ID');
  // The same rule the WebSocket applies to `sub`: a token it would refuse is never minted.
  if (!isViewerId(opts.viewer)) {
    throw new CrowdplayError('CP_ERR_PROTO_INVALID', [`viewer must be 1–${MAX_VIEWER_ID_CHARS} characters, no control characters`]);
  }
  return new SignJWT({ tid: DEV_TENANT_ID, ch: opts.channel })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(opts.viewer)
    .setIssuedAt()
    .setExpirationTime(`${opts.ttlS ?? DEV_TOKEN_TTL_S}s`)
    .sign(tenantKey(secret));
}
