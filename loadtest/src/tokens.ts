/**
 * Viewer tokens for load runs: HS256 JWTs as the gateway verifies them
 * (header `kid` = tenant id; claims `sub` = viewer id, `tid` = tenant id, `exp`).
 */
import { SignJWT } from 'jose';

/** A signer bound to one tenant; the HMAC key is imported once. */
export interface TokenMinter {
  /** Signs a token for viewer `sub`, valid `ttlS` seconds (default 3_600). */
  mint(sub: string, ttlS?: number): Promise<string>;
}

/** Creates a minter for `tenantId` with its signing secret (UTF-8 bytes are the HMAC key). */
export async function createTokenMinter(tenantId: string, secret: string): Promise<TokenMinter> {
  const key = await crypto.subtle.importKey('raw', new TextEncoder().encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return {
    mint: (sub, ttlS = 3_600) =>
      new SignJWT({ tid: tenantId })
        .setProtectedHeader({ alg: 'HS256', kid: tenantId, typ: 'JWT' })
        .setSubject(sub)
        .setIssuedAt()
        .setExpirationTime(Math.floor(Date.now() / 1000) + ttlS)
        .sign(key),
  };
}
