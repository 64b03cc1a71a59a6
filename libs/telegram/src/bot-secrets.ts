/**
 * A tenant bot's secrets at rest: its Bot API token and webhook secret are
 * stored encrypted with AES-256-GCM (node:crypto) under TELEGRAM_BOT_SECRETS_KEY,
 * each with a random 96-bit IV and its 128-bit tag, and bound to the bot id
 * (the id is the GCM additional data, so a ciphertext copied to another bot's
 * row does not open). Sealed form: `v1.<iv>.<tag>.<ciphertext>`, base64url.
 *
 * Without a key, only a dev deployment (standalone on a loopback HOST, on the
 * embedded database: no DATABASE_URL) may store or read bot secrets, under
 * {@link DEV_BOT_SECRETS_KEY}, a published key: anyone who can read that
 * database can open them.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { CrowdplayError } from '@crowdplay/protocol';

/** The key used when TELEGRAM_BOT_SECRETS_KEY is empty in a dev deployment: published, so it protects nothing. */
export const DEV_BOT_SECRETS_KEY = createHash('sha256').update('crowdplay dev bot secrets key (published: not a secret)').digest();

const VERSION = 'v1';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** True for a loopback host name or address (127.0.0.0/8, ::1, localhost). */
function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127(?:\.\d{1,3}){3}$/.test(host);
}

/**
 * The key bot secrets are sealed with: TELEGRAM_BOT_SECRETS_KEY when set, else {@link DEV_BOT_SECRETS_KEY} in a
 * dev deployment (`mode` standalone, a loopback `host` and the embedded database). A DATABASE_URL names a server
 * that other processes and people reach: secrets stored there are never sealed with a published key.
 * @param keyHex TELEGRAM_BOT_SECRETS_KEY (64 hex digits, or empty)
 * @param deployment.databaseUrl DATABASE_URL (empty: the embedded database) @defaultValue ''
 * @returns the key and whether it is the published dev key
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID when the setting is empty outside dev, or not 64 hex digits
 */
export function botSecretsKey(
  keyHex: string,
  deployment: { mode: string; host: string; databaseUrl?: string },
): { key: Buffer; dev: boolean } {
  if (keyHex !== '') {
    if (!/^[0-9a-fA-F]{64}$/.test(keyHex)) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', ['TELEGRAM_BOT_SECRETS_KEY: 64 hex digits']);
    return { key: Buffer.from(keyHex, 'hex'), dev: false };
  }
  if (deployment.mode === 'standalone' && isLoopback(deployment.host) && !deployment.databaseUrl)
    return { key: DEV_BOT_SECRETS_KEY, dev: true };
  throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [
    "TELEGRAM_BOT_SECRETS_KEY: required to store or read tenants' bot tokens outside dev (standalone on a loopback HOST and the embedded database); `openssl rand -hex 32`",
  ]);
}

/** Seals and opens a tenant bot's secrets (see the module doc). */
export class BotSecretBox {
  private readonly key: Buffer;

  /** @throws RangeError unless `key` is 32 bytes */
  constructor(key: Uint8Array) {
    if (key.length !== 32) throw new RangeError(`an AES-256 key is 32 bytes, got ${key.length}`);
    this.key = Buffer.from(key);
  }

  /** `plain` encrypted for bot `botId` (a fresh IV each call: sealing twice gives two different strings). */
  seal(botId: number, plain: string): string {
    const iv = randomBytes(IV_BYTES);
    const c = createCipheriv('aes-256-gcm', this.key, iv, { authTagLength: TAG_BYTES });
    c.setAAD(Buffer.from(`bot:${botId}`));
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return [VERSION, iv.toString('base64url'), c.getAuthTag().toString('base64url'), body.toString('base64url')].join('.');
  }

  /**
   * The clear text of a string {@link seal} made for `botId`.
   * @throws CrowdplayError CP_ERR_CONFIG_INVALID when it does not open: another key (TELEGRAM_BOT_SECRETS_KEY
   *   changed), another bot's row, or altered bytes. The message names neither the key nor the secret.
   */
  open(botId: number, sealed: string): string {
    const parts = sealed.split('.');
    const refuse = (): never => {
      throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [
        `the secrets of bot ${botId} do not open with TELEGRAM_BOT_SECRETS_KEY (another key, or altered data)`,
      ]);
    };
    if (parts.length !== 4 || parts[0] !== VERSION) return refuse();
    try {
      const iv = Buffer.from(parts[1]!, 'base64url');
      const tag = Buffer.from(parts[2]!, 'base64url');
      if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) return refuse();
      const d = createDecipheriv('aes-256-gcm', this.key, iv, { authTagLength: TAG_BYTES });
      d.setAAD(Buffer.from(`bot:${botId}`));
      d.setAuthTag(tag);
      return Buffer.concat([d.update(Buffer.from(parts[3]!, 'base64url')), d.final()]).toString('utf8');
    } catch {
      return refuse();
    }
  }
}
